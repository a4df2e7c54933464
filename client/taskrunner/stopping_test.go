package taskrunner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// A task of an allocation whose desired status is stop (restored after an
// agent restart with the stop recorded) is never started: not when it had
// not started, not again when its recovery fails. Before, both were
// started (and killed afterwards). A poststop task still runs: it is part
// of the stop.
func TestStoppingAllocNeverStartsTask(t *testing.T) {
	tests := []struct {
		name       string
		poststop   bool
		restored   *clientstate.LocalTaskState
		recoverErr error
		wantEvents string
		wantStarts int
	}{
		{name: "never started",
			restored:   &clientstate.LocalTaskState{State: &structs.TaskState{State: structs.TaskStatePending, Events: []*structs.TaskEvent{NewEvent(structs.TaskReceived)}}},
			wantEvents: "Received,Killed"},
		{name: "recovery failed",
			restored: &clientstate.LocalTaskState{
				Handle: &driver.TaskHandle{Version: 1, Config: &driver.TaskConfig{ID: "alloc-1/web/old", Name: "web"}},
				State:  &structs.TaskState{State: structs.TaskStateRunning, StartedAt: time.Now()}},
			recoverErr: errors.New("process 4242 is gone"), wantEvents: "Driver Failure,Killed"},
		{name: "poststop task runs", poststop: true, wantEvents: "Received,Task Setup,Started,Terminated", wantStarts: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "batch")
			f.alloc.DesiredStatus = structs.AllocDesiredStatusStop
			if tc.poststop {
				f.task.Lifecycle = &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPoststop}
			}
			f.drv.RecoverErr = tc.recoverErr
			f.drv.Script("web", fakedriver.Behavior{ExitAfter: time.Millisecond})
			tr := f.runner(tc.restored)
			go tr.Run()
			waitDone(t, tr)
			st := tr.State()
			if got := eventTypes(st); got != tc.wantEvents {
				t.Errorf("events = %s, want %s", got, tc.wantEvents)
			}
			if starts := strings.Count(strings.Join(f.drv.Calls(), ";"), "Start web"); starts != tc.wantStarts {
				t.Errorf("started %d times, want %d: %v", starts, tc.wantStarts, f.drv.Calls())
			}
			if st.State != structs.TaskStateDead || st.Failed {
				t.Errorf("state %s failed %v, want dead, not failed", st.State, st.Failed)
			}
			if last := st.Events[len(st.Events)-1]; !tc.poststop && last.DisplayMessage != NotStartedEvent().DisplayMessage {
				t.Errorf("last event %q", last.DisplayMessage)
			}
		})
	}
}
