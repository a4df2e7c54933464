package allocrunner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// putTaskState writes a task's record as the previous agent's task runner
// would have: running with a live driver task, or completed.
func (h *harness) putTaskState(name string, running bool) {
	h.t.Helper()
	ls := &clientstate.LocalTaskState{State: &structs.TaskState{State: structs.TaskStateDead,
		StartedAt: time.Now(), FinishedAt: time.Now()}}
	if running {
		hd, err := h.drv.StartTask(&driver.TaskConfig{ID: h.alloc.ID + "/" + name + "/prev", AllocID: h.alloc.ID, Name: name})
		if err != nil {
			h.t.Fatal(err)
		}
		ls = &clientstate.LocalTaskState{Handle: hd, State: &structs.TaskState{State: structs.TaskStateRunning, StartedAt: time.Now()}}
	}
	if err := h.db.PutTaskState(h.alloc.ID, name, ls); err != nil {
		h.t.Fatal(err)
	}
}

// A stop recorded before an agent restart: the restored runner never
// starts the tasks that were not running (before, it started the pending
// prestart tasks and sidecars, even the main tasks once the prestart phase
// was over, and killed them afterwards) and still kills the running ones.
func TestRestoredStopNeverStartsIdleTasks(t *testing.T) {
	tests := []struct {
		name          string
		running, done []string // as the previous agent left them
		wantPoststop  bool
	}{
		// The agent stopped while the allocation waited for its previous
		// one: nothing ran, so neither does the poststop task.
		{name: "nothing started"},
		// It stopped after init completed and before app started.
		{name: "main not started yet", running: []string{"proxy"}, done: []string{"init"}, wantPoststop: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "service", task("proxy", "prestart", true), task("init", "prestart", false),
				task("app", "", false), task("cleanup", "poststop", false))
			h.drv.Script("cleanup", fakedriver.Behavior{ExitAfter: time.Millisecond})
			// A shutdown delay widens the window in which the old runner
			// started tasks before killing them.
			delay := 300 * time.Millisecond
			h.alloc.Job.TaskGroups[0].ShutdownDelay = &delay
			h.alloc.PreviousAllocation = "prev"
			first := h.runner(false) // persists every task as pending
			first.cfg.PrevAlloc = func(ctx context.Context, _ string) { <-ctx.Done() }
			go first.Run()
			first.Shutdown()
			for _, name := range tc.running {
				h.putTaskState(name, true)
			}
			for _, name := range tc.done {
				h.putTaskState(name, false)
			}
			stop := *h.alloc
			stop.DesiredStatus = structs.AllocDesiredStatusStop
			if err := h.db.PutAlloc(&stop); err != nil {
				t.Fatal(err)
			}
			h.alloc = &stop

			ar := h.runner(true, &recorder{name: "network", log: h.log})
			go ar.Run()
			waitDone(t, ar)
			calls := strings.Join(h.drv.Calls(), ";")
			for _, name := range []string{"proxy", "init", "app", "cleanup"} {
				want := 0
				if name == "cleanup" && tc.wantPoststop || index(tc.running, name) >= 0 {
					want = 1 // the poststop task runs; a running task was started by the previous agent
				}
				if got := strings.Count(calls, "Start "+name); got != want {
					t.Errorf("%s started %d times, want %d: %s", name, got, want, calls)
				}
			}
			v := ar.ClientView()
			for name, s := range v.TaskStates {
				if s.State != structs.TaskStateDead {
					t.Errorf("task %s is %s, want dead", name, s.State)
				}
				idle := index(tc.running, name) < 0 && index(tc.done, name) < 0 && !(name == "cleanup" && tc.wantPoststop)
				if idle && (len(s.Events) == 0 || s.Events[len(s.Events)-1].DisplayMessage != taskrunner.NotStartedEvent().DisplayMessage) {
					t.Errorf("task %s: events %s, want the not-started one last", name, eventTypes(s))
				}
			}
			for _, name := range tc.running {
				if !strings.Contains(calls, "Stop "+name) {
					t.Errorf("running task %s not stopped: %s", name, calls)
				}
			}
			if len(h.drv.Running()) != 0 || v.ClientStatus != structs.AllocClientStatusComplete {
				t.Errorf("running %v, status %s", h.drv.Running(), v.ClientStatus)
			}
		})
	}
}

// stallingHook's Postrun never gets to clean up: it blocks until the test
// ends, as an agent that died after the allocation's last task and before
// its postrun hooks.
type stallingHook struct {
	*recorder
	entered, release chan struct{}
}

func (s *stallingHook) Postrun(context.Context, *AllocHookContext) error {
	close(s.entered)
	<-s.release
	return nil
}

// An allocation whose tasks all died before the agent stopped runs its
// postrun hooks after the restore unless they had completed: before, the
// restored runner skipped them, and the services, the socket and the
// network stayed until the allocation was garbage collected.
func TestRestoredTerminalAllocRunsPostrun(t *testing.T) {
	for _, crashed := range []bool{true, false} {
		t.Run(map[bool]string{true: "agent died before postrun", false: "postrun completed"}[crashed], func(t *testing.T) {
			h := newHarness(t, "batch", task("app", "", false))
			h.drv.Script("app", fakedriver.Behavior{ExitAfter: 20 * time.Millisecond})
			services := AllocHook(&recorder{name: "services", log: &callLog{}})
			stall := &stallingHook{recorder: &recorder{name: "services", log: &callLog{}},
				entered: make(chan struct{}), release: make(chan struct{})}
			if crashed {
				services = stall
			}
			first := h.runner(false, &recorder{name: "network", log: &callLog{}}, services)
			go first.Run()
			if crashed {
				select {
				case <-stall.entered:
				case <-time.After(hang):
					t.Fatal("postrun never reached")
				}
				t.Cleanup(func() { close(stall.release); waitDone(t, first) })
			} else {
				waitDone(t, first)
			}

			ar := h.runner(true, &recorder{name: "network", log: h.log}, &recorder{name: "services", log: h.log})
			go ar.Run()
			waitDone(t, ar)
			want := ""
			if crashed {
				want = "postrun services,postrun network"
			}
			if got := h.log.String(); got != want {
				t.Errorf("restored runner's hooks = %q, want %q", got, want)
			}
			if starts := strings.Count(strings.Join(h.drv.Calls(), ";"), "Start"); starts != 1 {
				t.Errorf("task started again: %v", h.drv.Calls())
			}
			if done, err := h.db.PostrunDone(h.alloc.ID); err != nil || !done {
				t.Errorf("postrun done recorded = %v, %v", done, err)
			}
		})
	}
}

func eventTypes(s *structs.TaskState) string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Type+": "+e.DisplayMessage)
	}
	return strings.Join(out, "; ")
}
