package rawexec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/driver/internal/procfs"
	"github.com/meshlet/meshlet/internal/testutil"
)

// stepScript prints a marker, then waits for a file in its cwd before each
// next marker, and finally exits 7.
const stepScript = `echo before
while [ ! -e step1 ]; do sleep 0.05; done
echo during
while [ ! -e step2 ]; do sleep 0.05; done
echo after
exit 7`

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverRunningTask: driver A starts a task and is dropped (the agent
// died); the task keeps running and logging with no driver; driver B,
// built on the same state, recovers the same process and sees its real
// exit code.
func TestRecoverRunningTask(t *testing.T) {
	stateDir := t.TempDir()
	a := newDriver(t, stateDir)
	cfg := dt.TaskConfig(t, "survivor", "sh", "-c", stepScript)
	handle, err := a.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "before")
	stA, err := a.InspectTask(cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Persist and reload the handle as the agent's state store would.
	raw, err := json.Marshal(handle)
	if err != nil {
		t.Fatal(err)
	}
	a = nil //nolint:ineffassign // simulate the agent's death: A is gone

	// With no driver instance around, the task moves on and logs.
	touch(t, filepath.Join(cfg.TaskDir, "step1"))
	dt.WaitLog(t, cfg, "during")

	b := newDriver(t, stateDir)
	var reloaded driver.TaskHandle
	if err := json.Unmarshal(raw, &reloaded); err != nil {
		t.Fatal(err)
	}
	if err := b.RecoverTask(&reloaded); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { _ = b.DestroyTask(cfg.ID, true) })
	if err := b.RecoverTask(&reloaded); err != nil {
		t.Fatalf("RecoverTask of a known task: %v", err)
	}
	stB, err := b.InspectTask(cfg.ID)
	if err != nil || stB.State != driver.TaskStateRunning || stB.PID != stA.PID {
		t.Fatalf("recovered %+v (%v), want running pid %d", stB, err, stA.PID)
	}
	if n := countTasks(t, cfg.TaskDir); n != 1 {
		t.Fatalf("%d task processes run in the task dir, want exactly 1", n)
	}

	touch(t, filepath.Join(cfg.TaskDir, "step2"))
	res := dt.Wait(t, b, cfg.ID)
	if res.ExitCode != 7 || res.Err != nil {
		t.Fatalf("exit %+v, want code 7", res)
	}
	if got := dt.Log(t, cfg, "stdout"); got != "before\nduring\nafter\n" {
		t.Fatalf("stdout %q", got)
	}
	if err := b.DestroyTask(cfg.ID, false); err != nil {
		t.Fatal(err)
	}
}

// countTasks counts live processes whose cwd is dir.
func countTasks(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || cwd != dir {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && string(st) == "sh\n" {
			n++
		}
	}
	return n
}

// TestRecoverExitedWhileDown: the task finishes while no agent runs; the
// new driver recovers it as exited with the recorded exit code.
func TestRecoverExitedWhileDown(t *testing.T) {
	stateDir := t.TempDir()
	a := newDriver(t, stateDir)
	cfg := dt.TaskConfig(t, "finisher", "sh", "-c", stepScript)
	handle, err := a.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "before")
	st, _ := a.InspectTask(cfg.ID)
	start, err := procfs.StartTime(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(cfg.TaskDir, "step1"))
	touch(t, filepath.Join(cfg.TaskDir, "step2"))
	testutil.WaitFor(t, dt.Timeout, "the task to exit", func() bool { return !procfs.Alive(st.PID, start) })

	b := newDriver(t, stateDir)
	testutil.WaitFor(t, dt.Timeout, "the recovered task to be exited", func() bool {
		if err := b.RecoverTask(handle); err != nil {
			t.Fatalf("RecoverTask: %v", err)
		}
		s, err := b.InspectTask(cfg.ID)
		return err == nil && s.State == driver.TaskStateExited
	})
	if res := dt.Wait(t, b, cfg.ID); res.ExitCode != 7 {
		t.Fatalf("exit %+v, want 7", res)
	}
	if err := b.StopTask(cfg.ID, 0, ""); err != nil {
		t.Fatalf("StopTask of an exited recovered task: %v", err)
	}
	if err := b.DestroyTask(cfg.ID, false); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverOrphanedTask: the executor was killed, so nobody records the
// task's exit: the driver reports the task failed and kills the orphan, and
// a later recovery fails clearly and leaves nothing registered or on disk.
func TestRecoverOrphanedTask(t *testing.T) {
	stateDir := t.TempDir()
	a := newDriver(t, stateDir)
	cfg := dt.TaskConfig(t, "orphan", "sh", "-c", stepScript)
	handle := dt.Start(t, a, cfg)
	dt.WaitLog(t, cfg, "before")
	var ds struct {
		ExecutorPID int `json:"executor_pid"`
		TaskPID     int `json:"task_pid"`
	}
	if err := json.Unmarshal(handle.DriverState, &ds); err != nil {
		t.Fatal(err)
	}
	taskStart, _ := procfs.StartTime(ds.TaskPID)
	if err := syscall.Kill(ds.ExecutorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := dt.Wait(t, a, cfg.ID)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "executor exited without recording") {
		t.Fatalf("exit %+v, want the executor's death reported", res)
	}
	testutil.WaitFor(t, dt.Timeout, "the orphan to be killed", func() bool { return !procfs.Alive(ds.TaskPID, taskStart) })

	b := newDriver(t, stateDir)
	err := b.RecoverTask(handle)
	if err == nil {
		t.Fatal("recovered a task whose executor is gone")
	}
	if _, err := b.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("unrecoverable task is known: %v", err)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state of the unrecoverable task left behind: %v", entries)
	}
}

func TestRecoverBadHandle(t *testing.T) {
	d := newDriver(t, "")
	cfg := dt.TaskConfig(t, "x", "true")
	tests := []struct {
		name   string
		handle *driver.TaskHandle
		is     error
	}{
		{"nil", nil, nil},
		{"no config", &driver.TaskHandle{Version: 1}, nil},
		{"handle version", &driver.TaskHandle{Version: 9, Config: cfg}, driver.ErrHandleVersion},
		{"state version", &driver.TaskHandle{Version: 1, Config: cfg, DriverState: []byte(`{"version":2}`)}, driver.ErrHandleVersion},
		{"garbage", &driver.TaskHandle{Version: 1, Config: cfg, DriverState: []byte("{")}, nil},
		{"empty state", &driver.TaskHandle{Version: 1, Config: cfg, DriverState: []byte(`{"version":1}`)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.RecoverTask(tc.handle)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("RecoverTask: %v, want an error (is %v)", err, tc.is)
			}
			if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
				t.Fatalf("bad handle registered a task: %v", err)
			}
		})
	}
}
