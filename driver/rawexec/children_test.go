package rawexec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// childPID reads the PID a task wrote to path.
func childPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, dt.Timeout, "the task's background child", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// running reports whether pid exists and is not a zombie (a killed
// orphan stays one until init reaps it).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// waitGone waits for pid to be gone, and kills it if it is not.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s: the background child %d still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A task's background children end with it, as Nomad's executor kills the
// task's process group: whether the task exits by itself or is stopped
// with a signal that a child ignores.
func TestBackgroundChildrenEndWithTask(t *testing.T) {
	d := newDriver(t, "")
	dir := t.TempDir()

	exited := filepath.Join(dir, "exited")
	cfg := dt.TaskConfig(t, "exits", "/bin/sh", "-c", `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > `+exited+`; exit 3`)
	dt.Start(t, d, cfg)
	pid := childPID(t, exited)
	if res := dt.Wait(t, d, cfg.ID); res.ExitCode != 3 {
		t.Fatalf("exit code = %d, want 3", res.ExitCode)
	}
	waitGone(t, pid, "after the task exited")

	stopped := filepath.Join(dir, "stopped")
	cfg = dt.TaskConfig(t, "stopped", "/bin/sh", "-c",
		`/bin/sh -c 'trap "" TERM; while :; do sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo $! > `+stopped+`; while :; do sleep 0.1; done`)
	dt.Start(t, d, cfg)
	pid = childPID(t, stopped)
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task was stopped with SIGTERM")
}
