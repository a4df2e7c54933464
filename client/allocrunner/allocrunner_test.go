package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

const hang = 10 * time.Second

// recorder is a hook that records its calls into a shared log.
type recorder struct {
	name      string
	log       *callLog
	prerunErr error
	env       map[string]string
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *callLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, ",")
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Prerun(_ context.Context, hc *AllocHookContext) error {
	r.log.add(fmt.Sprintf("prerun %s restored=%v", r.name, hc.Restored))
	for k, v := range r.env {
		hc.Env[k] = v
	}
	return r.prerunErr
}
func (r *recorder) Postrun(context.Context, *AllocHookContext) error {
	r.log.add("postrun " + r.name)
	return nil
}
func (r *recorder) Destroy(context.Context, *AllocHookContext) error {
	r.log.add("destroy " + r.name)
	return nil
}
func (r *recorder) PreKill(context.Context, *AllocHookContext) { r.log.add("prekill " + r.name) }

type harness struct {
	t     *testing.T
	drv   *fakedriver.Driver
	db    *clientstate.DB
	dir   string
	log   *callLog
	alloc *structs.Allocation
	// nodeAttrs are the node's attributes the runner sees.
	nodeAttrs map[string]string

	mu      sync.Mutex
	updates []*structs.Allocation
}

func task(name, hook string, sidecar bool) *structs.Task {
	t := &structs.Task{Name: name, Driver: "fake", Config: map[string]any{"x": "${NOMAD_ALLOC_INDEX}-${UPSTREAM}"},
		RestartPolicy: &structs.RestartPolicy{Attempts: ip(0), Mode: sp("fail")}}
	if hook != "" {
		t.Lifecycle = &structs.TaskLifecycle{Hook: hook, Sidecar: sidecar}
	}
	return t
}

func ip(i int) *int       { return &i }
func sp(s string) *string { return &s }

func newHarness(t *testing.T, jobType string, tasks ...*structs.Task) *harness {
	t.Helper()
	dir := t.TempDir()
	db, err := clientstate.Open(filepath.Join(dir, "client", "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	job := &structs.Job{ID: "j", Name: "j", Type: jobType, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: tasks}}}
	alloc := &structs.Allocation{ID: "alloc-1", Name: "j.g[0]", JobID: "j", TaskGroup: "g", Job: job,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	return &harness{t: t, drv: fakedriver.New("fake"), db: db, dir: dir, log: &callLog{}, alloc: alloc}
}

func (h *harness) runner(restored bool, hooks ...AllocHook) *AllocRunner {
	h.t.Helper()
	var tasks map[string]*clientstate.LocalTaskState
	if restored {
		var err error
		if tasks, err = h.db.TaskStates(h.alloc.ID); err != nil {
			h.t.Fatal(err)
		}
	}
	ar, err := New(Config{Alloc: h.alloc, Node: &structs.Node{ID: "n1", Datacenter: "dc1", Attributes: h.nodeAttrs},
		AllocDir: allocdir.New(filepath.Join(h.dir, "alloc"), h.alloc.ID),
		Driver: func(name string) (driver.Driver, error) {
			if name != "fake" {
				return nil, fmt.Errorf("driver %s not available", name)
			}
			return h.drv, nil
		},
		State: h.db, Hooks: hooks, Restored: restored, RestoredTasks: tasks, TaskRand: func(int64) int64 { return 0 },
		OnUpdate: func(a *structs.Allocation) {
			h.mu.Lock()
			h.updates = append(h.updates, a)
			h.mu.Unlock()
		}})
	if err != nil {
		h.t.Fatal(err)
	}
	return ar
}

func (h *harness) last() *structs.Allocation {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.updates) == 0 {
		return &structs.Allocation{}
	}
	return h.updates[len(h.updates)-1]
}

func (h *harness) waitStatus(ar *AllocRunner, status string) {
	h.t.Helper()
	testutil.WaitFor(h.t, hang, "client status "+status, func() bool { return ar.ClientView().ClientStatus == status })
}

func waitDone(t *testing.T, ar *AllocRunner) {
	t.Helper()
	select {
	case <-ar.WaitCh():
	case <-time.After(hang):
		t.Fatalf("alloc runner did not finish: %+v", ar.ClientView())
	}
}

func index(calls []string, c string) int {
	for i, x := range calls {
		if x == c {
			return i
		}
	}
	return -1
}

func TestLifecycleOrdering(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false), task("proxy", "prestart", true),
		task("init", "prestart", false), task("cleanup", "poststop", false), task("after", "poststart", false))
	h.drv.Script("init", fakedriver.Behavior{ExitAfter: 20 * time.Millisecond})
	h.drv.Script("after", fakedriver.Behavior{ExitAfter: time.Millisecond})
	h.drv.Script("cleanup", fakedriver.Behavior{ExitAfter: time.Millisecond})
	net := &recorder{name: "network", log: h.log}
	side := &recorder{name: "sidecar", log: h.log, env: map[string]string{"UPSTREAM": "up"}}
	ar := h.runner(false, net, side)
	go ar.Run()
	h.waitStatus(ar, structs.AllocClientStatusRunning)
	testutil.WaitFor(t, hang, "poststart task done", func() bool { return ar.TaskRunner("after").IsDead() })
	calls := h.drv.Calls()
	for _, before := range []string{"Start init", "Start proxy"} {
		if index(calls, before) < 0 || index(calls, before) > index(calls, "Start app") {
			t.Fatalf("%s not before Start app: %v", before, calls)
		}
	}
	if index(calls, "Start after") < index(calls, "Start app") || index(calls, "Start cleanup") >= 0 {
		t.Fatalf("poststart/poststop order wrong: %v", calls)
	}
	ar.Update(&structs.Allocation{ID: h.alloc.ID, Job: h.alloc.Job, TaskGroup: "g", DesiredStatus: structs.AllocDesiredStatusStop})
	waitDone(t, ar)
	calls = h.drv.Calls()
	stopApp, stopProxy, startCleanup := -1, -1, index(calls, "Start cleanup")
	for i, c := range calls {
		if strings.HasPrefix(c, "Stop app") {
			stopApp = i
		}
		if strings.HasPrefix(c, "Stop proxy") {
			stopProxy = i
		}
	}
	if !(stopApp >= 0 && stopApp < stopProxy && stopProxy < startCleanup) {
		t.Fatalf("stop order wrong (main, then sidecar, then poststop): %v", calls)
	}
	if got := h.log.String(); got != "prerun network restored=false,prerun sidecar restored=false,prekill network,prekill sidecar,postrun sidecar,postrun network" {
		t.Fatalf("hooks = %s", got)
	}
	v := ar.ClientView()
	if v.ClientStatus != structs.AllocClientStatusComplete {
		t.Fatalf("status = %s (%s)", v.ClientStatus, v.ClientDescription)
	}
	ls, _ := h.db.TaskStates(h.alloc.ID)
	if cfg := ls["app"].State; cfg.State != structs.TaskStateDead {
		t.Fatalf("persisted app state = %+v", cfg)
	}
}

func TestHookEnvReachesTasks(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	ar := h.runner(false, &recorder{name: "sidecar", log: h.log, env: map[string]string{"UPSTREAM": "10.0.0.1:8080"}})
	go ar.Run()
	h.waitStatus(ar, structs.AllocClientStatusRunning)
	cfg := h.persistedConfig("app")
	if cfg.Config["x"] != "0-10.0.0.1:8080" || cfg.Env["UPSTREAM"] != "10.0.0.1:8080" || cfg.Env["NOMAD_ALLOC_ID"] != "alloc-1" {
		t.Fatalf("task config %v env %v", cfg.Config, cfg.Env)
	}
	if !strings.HasSuffix(cfg.StdoutPath, "alloc-1/alloc/logs/app.stdout") {
		t.Fatalf("stdout path = %s", cfg.StdoutPath)
	}
	ar.Kill()
	waitDone(t, ar)
}

// A task of a driver that chroots it into its directory (the fingerprint's
// driver.<name>.fs_isolation = "chroot") gets the paths it sees inside:
// in its environment and in its interpolated config.
// persistedConfig waits for task's persisted handle and returns the task
// config it was started with (the in-memory state turns running just
// before the handle is written).
func (h *harness) persistedConfig(task string) *driver.TaskConfig {
	h.t.Helper()
	var cfg *driver.TaskConfig
	testutil.WaitFor(h.t, hang, task+"'s persisted handle", func() bool {
		ls, _ := h.db.TaskStates(h.alloc.ID)
		if ls[task] == nil || ls[task].Handle == nil {
			return false
		}
		cfg = ls[task].Handle.Config
		return true
	})
	return cfg
}

func TestIsolatedTaskSeesInsidePaths(t *testing.T) {
	app := task("app", "", false)
	app.Config = map[string]any{"script": "${NOMAD_TASK_DIR}/run.sh"}
	for _, c := range []struct {
		attrs                    map[string]string
		wantTask, wantAllocInEnv string
	}{
		{map[string]string{"driver.fake.fs_isolation": "chroot"}, "/local", "/alloc"},
		{nil, "", ""}, // host paths: checked by suffix below
	} {
		h := newHarness(t, "service", app)
		h.nodeAttrs = c.attrs
		ar := h.runner(false)
		go ar.Run()
		h.waitStatus(ar, structs.AllocClientStatusRunning)
		cfg := h.persistedConfig("app")
		if c.wantTask != "" {
			if cfg.Env["NOMAD_TASK_DIR"] != c.wantTask || cfg.Env["NOMAD_ALLOC_DIR"] != c.wantAllocInEnv ||
				cfg.Env["NOMAD_SECRETS_DIR"] != "/secrets" || cfg.Config["script"] != "/local/run.sh" {
				t.Errorf("isolated task: env %v config %v, want the paths inside its chroot", cfg.Env, cfg.Config)
			}
		} else if !strings.HasSuffix(cfg.Env["NOMAD_TASK_DIR"], "alloc-1/app/local") || cfg.Config["script"] != cfg.Env["NOMAD_TASK_DIR"]+"/run.sh" {
			t.Errorf("task without isolation: env %v config %v, want host paths", cfg.Env, cfg.Config)
		}
		ar.Kill()
		waitDone(t, ar)
	}
}

// Whatever stops an allocation, its PreKill hooks run first (services
// leave the catalog before any task is killed), as Nomad's killTasks.
func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		tasks      []*structs.Task
		script     map[string]fakedriver.Behavior
		hookErr    error
		wantStatus string
		wantEvent  map[string]string // task → an event type it must have
		wantHooks  string
		notStarted []string
	}{
		{name: "prestart failure never starts main",
			tasks:      []*structs.Task{task("init", "prestart", false), task("app", "", false)},
			script:     map[string]fakedriver.Behavior{"init": {ExitAfter: time.Millisecond, Exit: driver.ExitResult{ExitCode: 3}}},
			wantStatus: structs.AllocClientStatusFailed, notStarted: []string{"app"},
			wantEvent: map[string]string{"init": structs.TaskNotRestarting, "app": structs.TaskSiblingFailed},
			wantHooks: "prerun a restored=false,prekill a,postrun a"},
		{name: "main failure kills siblings",
			tasks:      []*structs.Task{task("app", "", false), task("other", "", false)},
			script:     map[string]fakedriver.Behavior{"app": {ExitAfter: 20 * time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}}},
			wantStatus: structs.AllocClientStatusFailed,
			wantEvent:  map[string]string{"app": structs.TaskNotRestarting, "other": structs.TaskSiblingFailed},
			wantHooks:  "prerun a restored=false,prekill a,postrun a"},
		{name: "hook failure rolls back and starts nothing",
			tasks:      []*structs.Task{task("app", "", false)},
			hookErr:    errors.New(`CNI plugin "bridge" not found in /opt/cni/bin; run make cni or set cni_path`),
			wantStatus: structs.AllocClientStatusFailed, notStarted: []string{"app"},
			wantEvent: map[string]string{"app": structs.TaskSetupFailure},
			// b failed part way: it is rolled back too, before a.
			wantHooks: "prerun a restored=false,prerun b restored=false,postrun b,postrun a"},
		{name: "batch main completes and stops the sidecar",
			tasks:      []*structs.Task{task("proxy", "prestart", true), task("app", "", false)},
			script:     map[string]fakedriver.Behavior{"app": {ExitAfter: 20 * time.Millisecond}},
			wantStatus: structs.AllocClientStatusComplete,
			wantEvent:  map[string]string{"proxy": structs.TaskKilled, "app": structs.TaskTerminated},
			wantHooks:  "prerun a restored=false,prekill a,postrun a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobType := "service"
			if strings.HasPrefix(tc.name, "batch") {
				jobType = "batch"
			}
			h := newHarness(t, jobType, tc.tasks...)
			for name, b := range tc.script {
				h.drv.Script(name, b)
			}
			hooks := []AllocHook{&recorder{name: "a", log: h.log}}
			if tc.hookErr != nil {
				hooks = append(hooks, &recorder{name: "b", log: h.log, prerunErr: tc.hookErr})
			}
			ar := h.runner(false, hooks...)
			go ar.Run()
			waitDone(t, ar)
			v := h.last()
			if v.ClientStatus != tc.wantStatus {
				t.Fatalf("status = %s (%s)", v.ClientStatus, v.ClientDescription)
			}
			if tc.hookErr != nil && v.ClientDescription != tc.hookErr.Error() {
				t.Errorf("description = %q", v.ClientDescription)
			}
			for name, typ := range tc.wantEvent {
				found := false
				for _, e := range v.TaskStates[name].Events {
					found = found || e.Type == typ
				}
				if !found || v.TaskStates[name].State != structs.TaskStateDead {
					t.Errorf("task %s: no %q event or not dead: %+v", name, typ, v.TaskStates[name])
				}
			}
			for _, name := range tc.notStarted {
				if index(h.drv.Calls(), "Start "+name) >= 0 {
					t.Errorf("%s was started: %v", name, h.drv.Calls())
				}
			}
			if got := h.log.String(); got != tc.wantHooks {
				t.Errorf("hooks = %s, want %s", got, tc.wantHooks)
			}
			if len(h.drv.Running()) != 0 {
				t.Errorf("tasks left running: %v", h.drv.Running())
			}
		})
	}
}

func TestShutdownLeavesTasksAndRestoreRecovers(t *testing.T) {
	h := newHarness(t, "service", task("proxy", "prestart", true), task("app", "", false))
	ar := h.runner(false, &recorder{name: "network", log: h.log})
	go ar.Run()
	testutil.WaitFor(t, hang, "both tasks running", func() bool { return len(h.drv.Running()) == 2 })
	ar.Shutdown()
	if n := len(h.drv.Running()); n != 2 {
		t.Fatalf("shutdown stopped tasks: %d running", n)
	}
	if strings.Contains(h.log.String(), "postrun") {
		t.Fatalf("shutdown ran postrun: %s", h.log)
	}
	// A new agent restores the allocation: hooks see Restored, tasks are
	// recovered, nothing is started again.
	ar2 := h.runner(true, &recorder{name: "network", log: h.log})
	go ar2.Run()
	testutil.WaitFor(t, hang, "tasks recovered", func() bool {
		return strings.Count(strings.Join(h.drv.Calls(), ";"), "Recover") == 2
	})
	h.waitStatus(ar2, structs.AllocClientStatusRunning)
	if starts := strings.Count(strings.Join(h.drv.Calls(), ";"), "Start"); starts != 2 {
		t.Fatalf("tasks started again after restore: %v", h.drv.Calls())
	}
	if !strings.Contains(h.log.String(), "prerun network restored=true") {
		t.Fatalf("hooks = %s", h.log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := ar2.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.drv.Running()) != 0 || ar2.cfg.AllocDir.Exists() {
		t.Fatal("destroy left tasks or the alloc dir behind")
	}
	if !strings.HasSuffix(h.log.String(), "postrun network,destroy network") {
		t.Fatalf("hooks = %s", h.log)
	}
}

func TestStoppedBeforeStartRunsNothing(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	h.alloc.DesiredStatus = structs.AllocDesiredStatusStop
	ar := h.runner(false, &recorder{name: "network", log: h.log})
	go ar.Run()
	waitDone(t, ar)
	if len(h.drv.Calls()) != 0 || h.log.String() != "" || ar.ClientView().ClientStatus != structs.AllocClientStatusComplete {
		t.Fatalf("calls %v hooks %s status %s", h.drv.Calls(), h.log, ar.ClientView().ClientStatus)
	}
}

func TestClientStatus(t *testing.T) {
	st := func(state string, failed bool) *structs.TaskState {
		return &structs.TaskState{State: state, Failed: failed}
	}
	tests := []struct {
		tasks map[string]*structs.TaskState
		setup string
		want  string
	}{
		{map[string]*structs.TaskState{"a": st("pending", false)}, "", "pending"},
		{map[string]*structs.TaskState{"a": st("running", false), "b": st("pending", false)}, "", "running"},
		// Nomad's order: a failed task fails the allocation while its
		// siblings are still being stopped (kill_timeout, shutdown_delay).
		{map[string]*structs.TaskState{"a": st("dead", true), "b": st("running", false)}, "", "failed"},
		{map[string]*structs.TaskState{"a": st("dead", true), "b": st("pending", false)}, "", "failed"},
		{map[string]*structs.TaskState{"a": st("dead", true), "b": st("dead", false)}, "", "failed"},
		{map[string]*structs.TaskState{"a": st("dead", false)}, "", "complete"},
		{map[string]*structs.TaskState{"a": st("pending", false)}, "boom", "failed"},
	}
	for i, tc := range tests {
		if got, _ := clientStatus(tc.tasks, tc.setup); got != tc.want {
			t.Errorf("%d: got %s want %s", i, got, tc.want)
		}
	}
}

// TestMissingDriverFailsAtOnce: a task whose driver the node does not have
// fails on its first start, with the reason, rather than going through its
// restart policy's attempts and delays: the node's drivers do not change
// while the agent runs.
func TestMissingDriverFailsAtOnce(t *testing.T) {
	app := task("app", "", false)
	app.Driver = "nope"
	app.RestartPolicy = &structs.RestartPolicy{Attempts: ip(3), Delay: durp(time.Hour), Mode: sp("fail")}
	h := newHarness(t, "service", app)
	ar := h.runner(false)
	go ar.Run()
	waitDone(t, ar)
	st := ar.ClientView().TaskStates["app"]
	if ar.ClientView().ClientStatus != structs.AllocClientStatusFailed || st == nil || !st.Failed || st.Restarts != 0 {
		t.Fatalf("allocation %s, task %+v; want failed with no restart", ar.ClientView().ClientStatus, st)
	}
	var types []string
	for _, ev := range st.Events {
		types = append(types, ev.Type)
	}
	last := st.Events[len(st.Events)-1]
	if got := strings.Join(types, ","); got != "Received,Task Setup,Driver Failure,Not Restarting" ||
		!last.FailsTask || !strings.Contains(last.DisplayMessage, "Error was unrecoverable: driver nope not available") {
		t.Fatalf("events %s, last %q", got, last.DisplayMessage)
	}
}

func durp(d time.Duration) *time.Duration { return &d }
