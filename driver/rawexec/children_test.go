package rawexec

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// waitGone waits for pid to be gone, and kills it if it is not.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.Running(pid) {
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
	pid := testutil.WaitPIDFile(t, dt.Timeout, exited)
	if res := dt.Wait(t, d, cfg.ID); res.ExitCode != 3 {
		t.Fatalf("exit code = %d, want 3", res.ExitCode)
	}
	waitGone(t, pid, "after the task exited")

	stopped := filepath.Join(dir, "stopped")
	cfg = dt.TaskConfig(t, "stopped", "/bin/sh", "-c",
		`/bin/sh -c 'trap "" TERM; while :; do sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo $! > `+stopped+`; while :; do sleep 0.1; done`)
	dt.Start(t, d, cfg)
	pid = testutil.WaitPIDFile(t, dt.Timeout, stopped)
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task was stopped with SIGTERM")
}
