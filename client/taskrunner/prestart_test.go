package taskrunner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// countingHook fails its first fails calls, then is done.
type countingHook struct {
	mu    sync.Mutex
	calls int
	fails int
	block bool
}

func (h *countingHook) Name() string { return "counting" }

func (h *countingHook) Prestart(ctx context.Context, req *PrestartRequest) (bool, error) {
	h.mu.Lock()
	h.calls++
	n, block := h.calls, h.block
	h.mu.Unlock()
	req.Emit(NewEvent("Hooking"))
	if block {
		<-ctx.Done()
		return false, ctx.Err()
	}
	if n <= h.fails {
		return false, errors.New("hook failed")
	}
	return true, nil
}

func (h *countingHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// A failing hook is a failed start: the restart policy retries, and once
// it is done, a restart of the task does not run it again.
func TestPrestartHookRetriedThenDone(t *testing.T) {
	f := newFixture(t, "batch")
	f.drv.Script("web", fakedriver.Behavior{ExitAfter: time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}}, fakedriver.Behavior{ExitAfter: time.Millisecond})
	h := &countingHook{fails: 1}
	tr := f.runner(nil)
	tr.cfg.Prestart = []PrestartHook{h}
	go tr.Run()
	waitDone(t, tr)
	st := tr.State()
	want := "Received,Task Setup,Hooking,Restarting,Hooking,Started,Terminated,Restarting,Started,Terminated"
	if got := eventTypes(st); got != want {
		t.Errorf("events = %s\nwant     %s", got, want)
	}
	if h.count() != 2 {
		t.Errorf("hook ran %d times, want 2 (once failing, once done)", h.count())
	}
	if st.Failed {
		t.Error("task failed")
	}
	persisted, err := f.db.TaskStates(f.alloc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := persisted["web"].PrestartDone; len(got) != 1 || got[0] != "counting" {
		t.Errorf("persisted PrestartDone = %v", got)
	}
	// A restored runner (agent restart) does not run a done hook again.
	f2 := newFixture(t, "service")
	f2.db, f2.alloc = f.db, f.alloc
	persisted["web"].State.State = structs.TaskStatePending
	tr2 := f2.runner(persisted["web"])
	tr2.cfg.Prestart = []PrestartHook{h}
	if err := tr2.prestart(); err != nil || h.count() != 2 {
		t.Errorf("restored prestart: err %v, hook ran %d times, want 2", err, h.count())
	}
}

// A hook that keeps failing fails the task through the restart policy.
func TestPrestartHookFailsTask(t *testing.T) {
	f := newFixture(t, "service")
	h := &countingHook{fails: 100}
	tr := f.runner(nil)
	tr.cfg.Prestart = []PrestartHook{h}
	go tr.Run()
	waitDone(t, tr)
	st := tr.State()
	if !st.Failed || h.count() != 3 {
		t.Errorf("failed %v after %d hook runs, want failed after 3", st.Failed, h.count())
	}
	if len(f.drv.Calls()) != 0 {
		t.Errorf("driver called: %v", f.drv.Calls())
	}
}

// Kill interrupts a hook that is still working.
func TestPrestartHookInterruptedByKill(t *testing.T) {
	f := newFixture(t, "service")
	h := &countingHook{block: true}
	tr := f.runner(nil)
	tr.cfg.Prestart = []PrestartHook{h}
	go tr.Run()
	deadline := time.Now().Add(hang)
	for h.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	waitDone(t, tr)
	st := tr.State()
	if st.Failed || st.Events[len(st.Events)-1].Type != structs.TaskKilled {
		t.Errorf("state after kill: failed %v, events %s", st.Failed, eventTypes(st))
	}
}
