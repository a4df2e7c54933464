package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// exitZeroOnStop is the fake driver whose tasks exit 0 when stopped (a
// task that handles its kill signal gracefully); it records each stop's
// timeout and signal.
type exitZeroOnStop struct {
	*fakedriver.Driver
	mu    sync.Mutex
	exits map[string]chan *driver.ExitResult
	stops []string
}

func (d *exitZeroOnStop) WaitTask(ctx context.Context, id string) (<-chan *driver.ExitResult, error) {
	if _, err := d.Driver.WaitTask(ctx, id); err != nil {
		return nil, err
	}
	ch := make(chan *driver.ExitResult, 1)
	d.mu.Lock()
	d.exits[id] = ch
	d.mu.Unlock()
	return ch, nil
}

func (d *exitZeroOnStop) StopTask(id string, timeout time.Duration, signal string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stops = append(d.stops, fmt.Sprintf("%v %s", timeout, signal))
	if ch, ok := d.exits[id]; ok {
		ch <- &driver.ExitResult{}
		delete(d.exits, id)
	}
	return nil
}

func (d *exitZeroOnStop) stopped() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.stops...)
}

func (f *fixture) runnerWith(drv driver.Driver) *TaskRunner {
	ad := allocdir.New("/nonexistent", f.alloc.ID)
	env := taskenv.NewBuilder(nil, f.alloc, f.task).Build()
	return New(Config{Alloc: f.alloc, Task: f.task, Driver: drv, TaskDir: ad.TaskDir("web"), AllocDir: ad.SharedDir,
		Env: env, State: f.db, Rand: func(int64) int64 { return 0 }})
}

func starts(calls []string) int {
	n := 0
	for _, c := range calls {
		if c == "Start web" {
			n++
		}
	}
	return n
}

// Restart (check_restart) stops the task with its kill_signal and
// kill_timeout and restarts it as after a failure: a batch task that exits
// 0 when stopped is started again, and restarts count against the policy
// (2 attempts: the third restart fails the task).
func TestRestartSignaled(t *testing.T) {
	f := newFixture(t, structs.JobTypeBatch)
	drv := &exitZeroOnStop{Driver: f.drv, exits: map[string]chan *driver.ExitResult{}}
	tr := f.runnerWith(drv)
	go tr.Run()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	reason := `healthcheck: check "alive" unhealthy`
	for i := 1; i <= 2; i++ {
		testutil.WaitFor(t, hang, fmt.Sprintf("start %d running", i), func() bool { return tr.TaskID() != "" })
		if err := tr.Restart(ctx, reason); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		testutil.WaitFor(t, hang, fmt.Sprintf("start %d", i+1), func() bool { return starts(f.drv.Calls()) == i+1 })
	}
	st := tr.State()
	// The last 10 events: "Received" fell off.
	want := "Task Setup,Started,Restart Signaled,Terminated,Restarting,Started,Restart Signaled,Terminated,Restarting,Started"
	if got := eventTypes(st); got != want {
		t.Fatalf("events = %s\nwant     %s", got, want)
	}
	if ev := st.Events[2]; ev.DisplayMessage != reason || ev.RestartReason != reason {
		t.Errorf("restart signaled event %+v, want the reason", ev)
	}
	if got := drv.stopped(); len(got) != 2 || got[0] != "3s SIGINT" {
		t.Errorf("stops %q, want the task's kill_timeout and kill_signal", got)
	}
	testutil.WaitFor(t, hang, "start 3 running", func() bool { return tr.TaskID() != "" })
	if err := tr.Restart(ctx, reason); err != nil {
		t.Fatal(err)
	}
	waitDone(t, tr)
	st = tr.State()
	last := st.Events[len(st.Events)-1]
	if st.State != structs.TaskStateDead || !st.Failed || last.Type != structs.TaskNotRestarting || st.Restarts != 2 {
		t.Fatalf("after the third restart: state %s failed %v restarts %d, last event %s %q", st.State, st.Failed, st.Restarts,
			last.Type, last.DisplayMessage)
	}
	if err := tr.Restart(ctx, reason); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("restart of a dead task: %v", err)
	}
}

// Restart of a task that is not running yet fails at once; a kill during
// the restart's stop wins.
func TestRestartNotRunning(t *testing.T) {
	f := newFixture(t, structs.JobTypeService)
	tr := f.runner(nil)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := tr.Restart(ctx, "x"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("restart before Run: %v", err)
	}
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	tr.Kill(ctx, nil)
	if err := tr.Restart(ctx, "x"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("restart after Kill: %v", err)
	}
	if st := tr.State(); st.State != structs.TaskStateDead || st.Failed {
		t.Fatalf("state %+v", st)
	}
}
