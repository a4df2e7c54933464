package bench

import (
	"strings"
	"testing"
	"time"
)

func TestCPUUse(t *testing.T) {
	a, err := readCPUTicks()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	b, err := readCPUTicks()
	if err != nil {
		t.Fatal(err)
	}
	u := a.until(b)
	if u.Wall < 50*time.Millisecond || u.Busy()+u.Idle == 0 {
		t.Fatalf("use = %+v", u)
	}
	s := cpuUse{User: 3 * time.Second, Kernel: time.Second, Wall: 4 * time.Second}.String(2)
	if want := "4.00 CPU-s busy (25 % in the kernel) over 4.00 s, 50 % of 2 CPUs"; s != want {
		t.Fatalf("String = %q, want %q", s, want)
	}
	if !strings.Contains(cpuUse{}.String(2), "0.00 CPU-s") {
		t.Fatal("zero use")
	}
}

func TestManyCPUFinding(t *testing.T) {
	if f := manyCPUFinding(&manyResult{}); f != "" {
		t.Fatalf("no samples gave %q", f)
	}
	m := &manyResult{cpuOK: true,
		bridgeCPU: cpuUse{User: 3 * time.Second, Kernel: 7 * time.Second, Wall: 5 * time.Second},
		hostCPU:   cpuUse{User: 2 * time.Second, Kernel: 2 * time.Second, Wall: 2 * time.Second}}
	f := manyCPUFinding(m)
	for _, want := range []string{"median bridge run 10.00 CPU-s busy (70 % in the kernel)", "extra 6.00 CPU-s (60 ms per allocation, 83 % of it in the kernel)"} {
		if !strings.Contains(f, want) {
			t.Errorf("finding lacks %q:\n%s", want, f)
		}
	}
}

func TestMedianRun(t *testing.T) {
	ds := []time.Duration{5 * time.Second, 3 * time.Second, 4 * time.Second}
	uses := []cpuUse{{Wall: 5 * time.Second}, {Wall: 3 * time.Second}, {Wall: 4 * time.Second}}
	d, u := medianRun(ds, uses)
	if d != 4*time.Second || u.Wall != 4*time.Second {
		t.Fatalf("medianRun = %v, %+v; want the 4 s run and its use", d, u)
	}
	if d, _ := medianRun(nil, nil); d != 0 {
		t.Fatalf("no runs: %v", d)
	}
	if got := secondsList(ds); got != "5.00, 3.00, 4.00" {
		t.Fatalf("secondsList = %q", got)
	}
}
