package bench

import (
	"os"
	"os/exec"
	"testing"
)

// TestExecutorsAnon: a child of this process whose command line is
// "<bin> executor -spec …" is found and sampled; other children are not.
func TestExecutorsAnon(t *testing.T) {
	if _, err := executorsAnon(os.Getpid()); err == nil {
		t.Fatal("found an executor among no children")
	}
	// A shell whose arguments read like an executor's (the list keeps bash
	// from exec'ing sleep in its place).
	exe := exec.Command("bash", "-c", "sleep 30; true", "executor", "-spec", "/dev/null")
	other := exec.Command("sleep", "30")
	for _, c := range []*exec.Cmd{exe, other} {
		if err := c.Start(); err != nil {
			t.Skip("cannot start helper processes:", err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	var anon []float64
	var err error
	for range 50 { // until bash has exec'd
		if anon, err = executorsAnon(os.Getpid()); err == nil {
			break
		}
		_ = exec.Command("sleep", "0.02").Run()
	}
	if err != nil || len(anon) != 1 || anon[0] <= 0 {
		t.Fatalf("executorsAnon = %v, %v; want the one executor", anon, err)
	}
}
