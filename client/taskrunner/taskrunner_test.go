package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

const hang = 10 * time.Second

type fixture struct {
	drv   *fakedriver.Driver
	db    *clientstate.DB
	alloc *structs.Allocation
	task  *structs.Task
}

func newFixture(t *testing.T, jobType string) *fixture {
	t.Helper()
	db, err := clientstate.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	kt := 3 * time.Second
	task := &structs.Task{Name: "web", Driver: "fake", KillTimeout: &kt, KillSignal: "SIGINT",
		Config:        map[string]any{"command": "${NOMAD_TASK_NAME}"},
		RestartPolicy: &structs.RestartPolicy{Attempts: ip(2), Interval: dur(30 * time.Minute), Delay: dur(time.Millisecond), Mode: sp("fail")}}
	job := &structs.Job{ID: "j", Name: "j", Type: jobType, TaskGroups: []*structs.TaskGroup{{Name: "g", Tasks: []*structs.Task{task}}}}
	alloc := &structs.Allocation{ID: "alloc-1", Name: "j.g[0]", TaskGroup: "g", Job: job}
	return &fixture{drv: fakedriver.New("fake"), db: db, alloc: alloc, task: task}
}

func (f *fixture) runner(restored *clientstate.LocalTaskState) *TaskRunner {
	ad := allocdir.New("/nonexistent", f.alloc.ID)
	env := taskenv.NewBuilder(nil, f.alloc, f.task).Build()
	return New(Config{Alloc: f.alloc, Task: f.task, Driver: f.drv, TaskDir: ad.TaskDir("web"), AllocDir: ad.SharedDir,
		Env: env, State: f.db, Restored: restored, Rand: func(int64) int64 { return 0 }})
}

func eventTypes(s *structs.TaskState) string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Type)
	}
	return strings.Join(out, ",")
}

func waitDone(t *testing.T, tr *TaskRunner) {
	t.Helper()
	select {
	case <-tr.WaitCh():
	case <-time.After(hang):
		t.Fatalf("task runner did not finish; state %+v", tr.State())
	}
}

func TestRunOutcomes(t *testing.T) {
	fail := fakedriver.Behavior{ExitAfter: time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}}
	tests := []struct {
		name       string
		jobType    string
		script     []fakedriver.Behavior
		wantEvents string
		wantFailed bool
		wantStarts int
		wantLast   string
	}{
		{name: "failing service task exhausts restarts", jobType: "service", script: []fakedriver.Behavior{fail},
			wantEvents: "Received,Task Setup,Started,Terminated,Restarting,Started,Terminated,Restarting,Started,Terminated",
			wantFailed: true, wantStarts: 3,
			wantLast: `Exceeded allowed attempts 2 in interval 30m0s and mode is "fail"`},
		{name: "batch exit 0 completes", jobType: "batch",
			script:     []fakedriver.Behavior{{ExitAfter: time.Millisecond}},
			wantEvents: "Received,Task Setup,Started,Terminated", wantStarts: 1},
		{name: "batch failure then success", jobType: "batch",
			script:     []fakedriver.Behavior{fail, {ExitAfter: time.Millisecond}},
			wantEvents: "Received,Task Setup,Started,Terminated,Restarting,Started,Terminated", wantStarts: 2},
		{name: "start failures are driver failures", jobType: "service",
			script:     []fakedriver.Behavior{{StartErr: errors.New(`failed to start task: exec: "/nope": no such file`)}},
			wantEvents: "Received,Task Setup,Driver Failure,Restarting,Driver Failure,Restarting,Driver Failure",
			wantFailed: true, wantStarts: 3, wantLast: `Exceeded allowed attempts 2 in interval 30m0s and mode is "fail"`},
		{name: "unrecoverable start failure fails at once", jobType: "service",
			script:     []fakedriver.Behavior{{StartErr: driver.Unrecoverable(errors.New("config: command is required"))}},
			wantEvents: "Received,Task Setup,Driver Failure", wantFailed: true, wantStarts: 1,
			wantLast: "Error was unrecoverable: config: command is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.jobType)
			f.drv.Script("web", tc.script...)
			tr := f.runner(nil)
			go tr.Run()
			waitDone(t, tr)
			st := tr.State()
			got := eventTypes(st)
			if tc.wantLast != "" {
				tc.wantEvents += ",Not Restarting"
			}
			// Nomad keeps the last 10 events.
			want := strings.Split(tc.wantEvents, ",")
			if len(want) > maxEvents {
				want = want[len(want)-maxEvents:]
			}
			if got != strings.Join(want, ",") {
				t.Errorf("events = %s\nwant     %s", got, strings.Join(want, ","))
			}
			if st.State != structs.TaskStateDead || st.Failed != tc.wantFailed {
				t.Errorf("state %s failed %v", st.State, st.Failed)
			}
			if tc.wantLast != "" && st.Events[len(st.Events)-1].DisplayMessage != tc.wantLast {
				t.Errorf("last message = %q", st.Events[len(st.Events)-1].DisplayMessage)
			}
			starts := 0
			for _, c := range f.drv.Calls() {
				if c == "Start web" {
					starts++
				}
			}
			if starts != tc.wantStarts {
				t.Errorf("starts = %d, want %d", starts, tc.wantStarts)
			}
			if st.Restarts != uint64(tc.wantStarts-1) {
				t.Errorf("restarts = %d", st.Restarts)
			}
			ls, _ := f.db.TaskStates("alloc-1")
			if ls["web"] == nil || ls["web"].Handle != nil || ls["web"].State.State != structs.TaskStateDead {
				t.Errorf("persisted state = %+v", ls["web"])
			}
		})
	}
}

func TestRestartingMessage(t *testing.T) {
	ev := restartingEvent(Decision{Restart: true, Delay: 15 * time.Second})
	if ev.DisplayMessage != "Task restarting in 15s" {
		t.Fatalf("message = %q", ev.DisplayMessage)
	}
}

func TestKillRunningTask(t *testing.T) {
	f := newFixture(t, "service")
	tr := f.runner(nil)
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	var ls map[string]*clientstate.LocalTaskState
	testutil.WaitFor(t, hang, "handle persisted", func() bool {
		ls, _ = f.db.TaskStates("alloc-1")
		return ls["web"] != nil && ls["web"].Handle != nil
	})
	if ls["web"].Handle.Config.ID != tr.TaskID() {
		t.Fatal("persisted handle is not the running task's")
	}
	if ls["web"].Handle.Config.Config["command"] != "web" {
		t.Fatalf("config not interpolated: %v", ls["web"].Handle.Config.Config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	st := tr.State()
	if got := eventTypes(st); got != "Received,Task Setup,Started,Killing,Terminated,Killed" {
		t.Fatalf("events = %s", got)
	}
	if st.State != structs.TaskStateDead || st.Failed {
		t.Fatalf("state = %+v", st)
	}
	if st.Events[3].DisplayMessage != "Sent interrupt. Waiting 3s before force killing" {
		t.Errorf("killing message = %q", st.Events[3].DisplayMessage)
	}
	calls := strings.Join(f.drv.Calls(), ";")
	if !strings.Contains(calls, "Stop web 3s SIGINT") {
		t.Errorf("calls = %s", calls)
	}
	tr.Kill(ctx, nil) // idempotent
}

func TestKillBeforeRunAndMarkDead(t *testing.T) {
	f := newFixture(t, "service")
	tr := f.runner(nil)
	tr.MarkDead(SiblingFailedEvent("init"), false)
	go tr.Run() // no-op now
	waitDone(t, tr)
	if st := tr.State(); st.State != structs.TaskStateDead || eventTypes(st) != "Received,Sibling Task Failed" {
		t.Fatalf("state = %+v", st)
	}
	if len(f.drv.Calls()) != 0 {
		t.Fatalf("driver called: %v", f.drv.Calls())
	}
}

func TestShutdownDetachesAndRecoveryReattaches(t *testing.T) {
	f := newFixture(t, "service")
	tr := f.runner(nil)
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	id := tr.TaskID()
	tr.Shutdown()
	if running := f.drv.Running(); len(running) != 1 {
		t.Fatalf("shutdown stopped the task: running %v", running)
	}
	ls, _ := f.db.TaskStates("alloc-1")
	if ls["web"].Handle == nil || ls["web"].State.State != structs.TaskStateRunning {
		t.Fatalf("persisted after shutdown: %+v", ls["web"])
	}
	// A new runner (new agent) recovers the same task instead of starting one.
	tr2 := f.runner(ls["web"])
	go tr2.Run()
	testutil.WaitFor(t, hang, "task recovered", func() bool {
		calls := f.drv.Calls()
		return calls[len(calls)-1] == "Recover web"
	})
	if tr2.TaskID() != id || strings.Count(strings.Join(f.drv.Calls(), ";"), "Start") != 1 {
		t.Fatalf("recovered %q (want %q), calls %v", tr2.TaskID(), id, f.drv.Calls())
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr2.Kill(ctx, nil)
	if len(f.drv.Running()) != 0 {
		t.Fatal("task still running after kill")
	}
}

func TestFailedRecoveryAppliesRestartPolicy(t *testing.T) {
	f := newFixture(t, "service")
	f.drv.RecoverErr = errors.New("process 4242 is gone")
	restored := &clientstate.LocalTaskState{
		Handle: &driver.TaskHandle{Version: 1, Config: &driver.TaskConfig{ID: "alloc-1/web/old", Name: "web"}},
		State:  &structs.TaskState{State: structs.TaskStateRunning},
	}
	tr := f.runner(restored)
	go tr.Run()
	testutil.WaitFor(t, hang, "task restarted", func() bool { return tr.TaskID() != "" && tr.TaskID() != "alloc-1/web/old" })
	st := tr.State()
	if got := eventTypes(st); got != "Driver Failure,Restarting,Started" {
		t.Fatalf("events = %s", got)
	}
	if !strings.Contains(st.Events[0].DisplayMessage, "failed to recover task: process 4242 is gone") {
		t.Fatalf("message = %q", st.Events[0].DisplayMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
}

func TestRestoredDeadTaskStaysDead(t *testing.T) {
	f := newFixture(t, "batch")
	tr := f.runner(&clientstate.LocalTaskState{State: &structs.TaskState{State: structs.TaskStateDead}})
	go tr.Run()
	waitDone(t, tr)
	if len(f.drv.Calls()) != 0 {
		t.Fatalf("dead task touched the driver: %v", f.drv.Calls())
	}
}

// A recovered task killed (or marked dead) before Run reached it must still
// be stopped: its process is alive.
func TestKillRecoveredTaskBeforeRun(t *testing.T) {
	for _, viaMarkDead := range []bool{false, true} {
		f := newFixture(t, "service")
		first := f.runner(nil)
		go first.Run()
		testutil.WaitFor(t, hang, "task running", func() bool { return first.TaskID() != "" })
		first.Shutdown()
		ls, _ := f.db.TaskStates("alloc-1")
		tr := f.runner(ls["web"])
		if viaMarkDead {
			tr.MarkDead(SetupFailureEvent(errors.New("network restore failed")), true)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			tr.Kill(ctx, nil)
			cancel()
		}
		go tr.Run() // too late: must not start anything or close early
		waitDone(t, tr)
		calls := strings.Join(f.drv.Calls(), ";")
		if len(f.drv.Running()) != 0 || !strings.Contains(calls, "Recover web;Stop web") || strings.Count(calls, "Start") != 1 {
			t.Fatalf("markDead=%v: running %v calls %s", viaMarkDead, f.drv.Running(), calls)
		}
		if st := tr.State(); st.State != structs.TaskStateDead || st.Failed != viaMarkDead {
			t.Fatalf("markDead=%v: state %+v", viaMarkDead, st)
		}
	}
}

// recordingStore records every task state write.
type recordingStore struct {
	clientstate.Store
	mu     sync.Mutex
	writes []*clientstate.LocalTaskState
}

func (s *recordingStore) PutTaskState(allocID, task string, ls *clientstate.LocalTaskState) error {
	s.mu.Lock()
	s.writes = append(s.writes, ls)
	s.mu.Unlock()
	return s.Store.PutTaskState(allocID, task, ls)
}

// Starting a task is one state write, and it carries the handle recovery
// needs together with the running state.
func TestStartIsOneWrite(t *testing.T) {
	f := newFixture(t, "service")
	rec := &recordingStore{Store: f.db}
	tr := f.runner(nil)
	tr.cfg.State = rec
	go tr.Run()
	testutil.WaitFor(t, hang, "task running", func() bool { return tr.TaskID() != "" })
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, w := range rec.writes {
		got = append(got, fmt.Sprintf("%s %s handle=%v", w.State.State, eventTypes(w.State), w.Handle != nil))
	}
	// (New wrote Received before the recorder was in place.)
	want := []string{"pending Received,Task Setup handle=false", "running Received,Task Setup,Started handle=true"}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("writes = %q\nwant them to start with %q", got, want)
	}
}

// TestSidecarRestartsAtOnce: a connect sidecar that crashes is started
// again at once (the group's 1 h delay would be an outage of the mesh), a
// plain task with the same policy waits the delay.
func TestSidecarRestartsAtOnce(t *testing.T) {
	for _, sidecar := range []bool{true, false} {
		f := newFixture(t, "service")
		f.task.RestartPolicy = &structs.RestartPolicy{Attempts: ip(5), Interval: dur(time.Hour), Delay: dur(time.Hour), Mode: sp("fail")}
		if sidecar {
			f.task.Kind = "connect-proxy:web"
			f.task.Lifecycle = &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPrestart, Sidecar: true}
		}
		f.drv.Script("web", fakedriver.Behavior{ExitAfter: time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}})
		tr := f.runner(nil)
		go tr.Run()
		starts := func() int { return strings.Count(strings.Join(f.drv.Calls(), ","), "Start web") }
		var delays []time.Duration
		testutil.WaitFor(t, hang, "waiting a restart delay", func() bool {
			delays = delays[:0]
			for _, e := range tr.State().Events {
				if e.Type == structs.TaskRestarting {
					delays = append(delays, time.Duration(e.StartDelay))
				}
			}
			return len(delays) > 0 && delays[len(delays)-1] == time.Hour
		})
		want := []time.Duration{time.Hour}
		if sidecar {
			want = []time.Duration{0, 0, time.Hour}
		}
		if !slices.Equal(delays, want) || starts() != len(want) {
			t.Errorf("sidecar=%v: restart delays %v after %d starts, want %v", sidecar, delays, starts(), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		tr.Kill(ctx, nil)
		cancel()
	}
}

// A task's kill_timeout is capped at the client's max_kill_timeout, as
// Nomad's is: a job cannot hold a stop for longer than the node allows.
func TestKillTimeoutCappedByMaxKillTimeout(t *testing.T) {
	f := newFixture(t, "service")
	long := 2 * time.Hour
	f.task.KillTimeout = &long
	ad := allocdir.New("/nonexistent", f.alloc.ID)
	tr := New(Config{Alloc: f.alloc, Task: f.task, Driver: f.drv, TaskDir: ad.TaskDir("web"), AllocDir: ad.SharedDir,
		Env: taskenv.NewBuilder(nil, f.alloc, f.task).Build(), State: f.db, Rand: func(int64) int64 { return 0 },
		MaxKillTimeout: 30 * time.Second})
	go tr.Run()
	testutil.WaitFor(t, hang, "the task running", func() bool { return tr.State().State == structs.TaskStateRunning })
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	tr.Kill(ctx, nil)
	st := tr.State()
	var killing *structs.TaskEvent
	for _, e := range st.Events {
		if e.Type == structs.TaskKilling {
			killing = e
		}
	}
	if killing == nil || killing.KillTimeout != 30*time.Second || !strings.Contains(killing.DisplayMessage, "Waiting 30s") {
		t.Fatalf("killing event = %+v, want a 30s kill timeout", killing)
	}
	if calls := strings.Join(f.drv.Calls(), ";"); !strings.Contains(calls, "Stop web 30s SIGINT") {
		t.Fatalf("calls = %s, want the stop with the capped 30s", calls)
	}
}
