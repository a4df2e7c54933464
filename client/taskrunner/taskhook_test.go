package taskrunner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// blockingHook blocks Prestart until release is closed, then returns err.
type blockingHook struct {
	release chan struct{}
	err     error
	mu      sync.Mutex
	req     TaskHookRequest
	stopped bool
}

func (h *blockingHook) Prestart(ctx context.Context, req TaskHookRequest) error {
	h.mu.Lock()
	h.req = req
	h.mu.Unlock()
	select {
	case <-h.release:
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *blockingHook) Env() map[string]string { return map[string]string{"FROM_TEMPLATE": "yes"} }

func (h *blockingHook) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
}

func (h *blockingHook) wasStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// recordingDriver records the env of each start and each signal.
type recordingDriver struct {
	*exitZeroOnStop
	mu      sync.Mutex
	envs    []map[string]string
	signals []string
}

func (d *recordingDriver) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	d.mu.Lock()
	d.envs = append(d.envs, cfg.Env)
	d.mu.Unlock()
	return d.exitZeroOnStop.StartTask(cfg)
}

func (d *recordingDriver) SignalTask(id, sig string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.signals = append(d.signals, sig)
	return nil
}

func newRecording(f *fixture) *recordingDriver {
	return &recordingDriver{exitZeroOnStop: &exitZeroOnStop{Driver: f.drv, exits: map[string]chan *driver.ExitResult{}}}
}

func TestTaskHookBlocksStartAndAddsEnv(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	drv := newRecording(f)
	tr := f.runnerWith(drv)
	hook := &blockingHook{release: make(chan struct{})}
	tr.cfg.TaskHook = hook
	go tr.Run()
	testutil.WaitFor(t, hang, "prestart called", func() bool { hook.mu.Lock(); defer hook.mu.Unlock(); return hook.req.Task == tr })
	if n := starts(f.drv.Calls()); n != 0 {
		t.Fatalf("task started %d times while prestart blocked", n)
	}
	close(hook.release)
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	drv.mu.Lock()
	env := drv.envs[0]
	drv.mu.Unlock()
	if env["FROM_TEMPLATE"] != "yes" || env["NOMAD_TASK_NAME"] != "web" {
		t.Errorf("start env %v lacks the hook's or the task's variables", env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	if !hook.wasStopped() {
		t.Error("hook not stopped after the task died")
	}
}

func TestTaskHookKilledWhileBlocked(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	tr := f.runnerWith(newRecording(f))
	hook := &blockingHook{release: make(chan struct{})}
	tr.cfg.TaskHook = hook
	go tr.Run()
	testutil.WaitFor(t, hang, "prestart called", func() bool { hook.mu.Lock(); defer hook.mu.Unlock(); return hook.req.Task != nil })
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	st := tr.State()
	if st.State != structs.TaskStateDead || st.Failed || starts(f.drv.Calls()) != 0 {
		t.Fatalf("state %s failed %v, starts %d", st.State, st.Failed, starts(f.drv.Calls()))
	}
	if last := st.Events[len(st.Events)-1]; last.Type != structs.TaskKilled {
		t.Errorf("last event %s", last.Type)
	}
}

func TestTaskHookErrorFailsTask(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	tr := f.runnerWith(newRecording(f))
	hook := &blockingHook{release: make(chan struct{}), err: errors.New("template[0]: bad")}
	close(hook.release)
	tr.cfg.TaskHook = hook
	go tr.Run()
	waitDone(t, tr)
	st := tr.State()
	last := st.Events[len(st.Events)-1]
	if !st.Failed || last.Type != structs.TaskSetupFailure || !strings.Contains(last.DisplayMessage, "template[0]: bad") {
		t.Fatalf("failed %v, last event %s %q", st.Failed, last.Type, last.DisplayMessage)
	}
}

// RestartInPlace restarts at once and outside the restart policy: three
// restarts with attempts = 2 leave the task running.
func TestRestartInPlace(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	tr := f.runnerWith(newRecording(f))
	go tr.Run()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	const reason = "Template with change_mode restart re-rendered"
	for i := 1; i <= 3; i++ {
		testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
		if err := tr.RestartInPlace(ctx, reason); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		testutil.WaitFor(t, hang, "restarted", func() bool { return starts(f.drv.Calls()) == i+1 })
	}
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	st := tr.State()
	if st.State != structs.TaskStateRunning || st.Failed || st.Restarts != 3 {
		t.Fatalf("state %s failed %v restarts %d", st.State, st.Failed, st.Restarts)
	}
	var signaled int
	for _, ev := range st.Events {
		if ev.Type == structs.TaskRestartSignal && ev.DisplayMessage == reason {
			signaled++
		}
	}
	if signaled == 0 {
		t.Errorf("no %q event: %s", reason, eventTypes(st))
	}
	tr.Kill(ctx, nil)
}

func TestSignal(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	drv := newRecording(f)
	tr := f.runnerWith(drv)
	ev := NewEvent(structs.TaskSignaling)
	ev.DisplayMessage = "Template re-rendered"
	if err := tr.Signal(ev, "SIGHUP"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("signal before Run: %v", err)
	}
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	if err := tr.Signal(ev, "SIGHUP"); err != nil {
		t.Fatal(err)
	}
	drv.mu.Lock()
	sigs := strings.Join(drv.signals, ",")
	drv.mu.Unlock()
	if sigs != "SIGHUP" {
		t.Errorf("signals %q", sigs)
	}
	st := tr.State()
	if last := st.Events[len(st.Events)-1]; last.Type != structs.TaskSignaling || last.DisplayMessage != "Template re-rendered" {
		t.Errorf("last event %s %q", last.Type, last.DisplayMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
}

// A recovered task whose hook fails keeps running (degraded), as the
// alloc runner treats other restore failures.
func TestTaskHookErrorOnRestoreKeepsTask(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	drv := newRecording(f)
	tr := f.runnerWith(drv)
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	tr.Shutdown() // agent shutdown: the task keeps running

	states, err := f.db.TaskStates(f.alloc.ID)
	ls := states["web"]
	if err != nil || ls == nil || ls.Handle == nil {
		t.Fatalf("persisted state %+v %v", ls, err)
	}
	hook := &blockingHook{release: make(chan struct{}), err: errors.New("template[0]: source gone")}
	close(hook.release)
	ad := allocdir.New("/nonexistent", f.alloc.ID)
	tr2 := New(Config{Alloc: f.alloc, Task: f.task, Driver: drv, TaskDir: ad.TaskDir("web"), AllocDir: ad.SharedDir,
		State: f.db, Restored: ls, TaskHook: hook, Rand: func(int64) int64 { return 0 }})
	go tr2.Run()
	testutil.WaitFor(t, hang, "restore degraded event", func() bool {
		for _, ev := range tr2.State().Events {
			if ev.Type == TaskRestoreDegraded && strings.Contains(ev.DisplayMessage, "source gone") {
				return true
			}
		}
		return false
	})
	if st := tr2.State(); st.State != structs.TaskStateRunning || st.Failed {
		t.Fatalf("restored task state %s failed %v", st.State, st.Failed)
	}
	if n := starts(f.drv.Calls()); n != 1 {
		t.Errorf("task started %d times, want 1 (recovered, not restarted)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr2.Kill(ctx, nil)
}
