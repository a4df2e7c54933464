package connecthook

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// taskServicesAlloc: group service grp; main task web with its own service
// web-task, restarted after restartDelay when it fails; poststart task
// once with its own service once-task, which runs to completion.
func taskServicesAlloc(restartDelay time.Duration) *structs.Allocation {
	attempts, interval := 2, time.Hour
	web := &structs.Task{Name: "web", Driver: "fake", Services: []*structs.Service{{Name: "web-task", PortLabel: "8080"}},
		RestartPolicy: &structs.RestartPolicy{Attempts: &attempts, Interval: &interval, Delay: &restartDelay}}
	once := &structs.Task{Name: "once", Driver: "fake", Services: []*structs.Service{{Name: "once-task", PortLabel: "8081"}},
		Lifecycle: &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPoststart}}
	job := &structs.Job{ID: "j", Name: "j", Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Services: []*structs.Service{{Name: "grp", PortLabel: "9000"}}, Tasks: []*structs.Task{web, once}}}}
	return &structs.Allocation{ID: "a1", Name: "j.g[0]", JobID: "j", TaskGroup: "g", Job: job,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
}

// TestTaskServicesFollowTheirTask: a task's own services are in the catalog
// only while the task runs: not while it waits out its restart delay, nor
// once it is dead; a restart registers them again. The group's service
// stays for the allocation's life.
func TestTaskServicesFollowTheirTask(t *testing.T) {
	alloc := taskServicesAlloc(2 * time.Second)
	dir := t.TempDir()
	db, err := clientstate.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	drv := fakedriver.New("fake")
	drv.Script("web", fakedriver.Behavior{ExitAfter: 1500 * time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}}, fakedriver.Behavior{})
	drv.Script("once", fakedriver.Behavior{ExitAfter: 500 * time.Millisecond})
	cat := catalog.New()
	hooks := Factory(Deps{Sockets: &sockets{served: map[string]string{}, removed: map[string]string{}}, Catalog: cat,
		NodeID: "n1", Datacenter: "dc1"})(alloc)
	ar, err := allocrunner.New(allocrunner.Config{Alloc: alloc, Node: &structs.Node{ID: "n1", Datacenter: "dc1"},
		AllocDir: allocdir.New(filepath.Join(dir, "alloc"), alloc.ID), State: db, Hooks: hooks,
		Driver: func(string) (driver.Driver, error) { return drv, nil }, TaskRand: func(int64) int64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	go ar.Run()
	t.Cleanup(func() {
		ar.Kill()
		<-ar.WaitCh()
	})
	registered := func(name string) bool { return len(cat.Service(name)) == 1 }
	web := func() *structs.TaskState { return ar.TaskRunner("web").State() }
	once := func() *structs.TaskState { return ar.TaskRunner("once").State() }

	testutil.WaitFor(t, hang, "web's service while it runs", func() bool {
		return web().State == structs.TaskStateRunning && registered("web-task") && registered("grp")
	})
	if id := connect.TaskServiceID(alloc.ID, "web", "web-task", "8080"); cat.Service("web-task")[0].ID != id {
		t.Fatalf("web-task registered as %q, want %q", cat.Service("web-task")[0].ID, id)
	}
	testutil.WaitFor(t, hang, "once's service while it runs", func() bool {
		return once().State == structs.TaskStateRunning && registered("once-task")
	})
	testutil.WaitFor(t, hang, "once's service gone once it is dead", func() bool {
		return once().State == structs.TaskStateDead && !registered("once-task")
	})
	if st := web(); st.State != structs.TaskStateRunning || st.Restarts != 0 || !registered("web-task") || !registered("grp") {
		t.Fatalf("web %s (restarts %d), web-task registered %v, grp %v; want web's first run, both registered",
			st.State, st.Restarts, registered("web-task"), registered("grp"))
	}
	testutil.WaitFor(t, hang, "web failed and waiting out its restart delay", func() bool {
		return web().State == structs.TaskStatePending && web().Restarts == 1
	})
	testutil.WaitFor(t, time.Second, "web's service gone during the restart delay", func() bool { return !registered("web-task") })
	if st := web(); st.State != structs.TaskStatePending || !registered("grp") {
		t.Fatalf("web %s (want still in its restart delay), group service registered %v", st.State, registered("grp"))
	}
	testutil.WaitFor(t, hang, "web's service back once it runs again", func() bool {
		return web().State == structs.TaskStateRunning && web().Restarts == 1 && registered("web-task")
	})
	ar.Kill()
	<-ar.WaitCh()
	if n := len(cat.All()); n != 0 {
		t.Fatalf("%d instances left after the allocation stopped", n)
	}
}

const hang = 10 * time.Second

// TestCheckedTaskServiceStaysAwayWhileTaskDown: a task service with a
// check is registered with its check while its task runs; while the task
// is down its check's results do not register it again.
func TestCheckedTaskServiceStaysAwayWhileTaskDown(t *testing.T) {
	port := closedPort(t)
	alloc := taskServicesAlloc(time.Second)
	tg := alloc.Job.TaskGroups[0]
	tg.Tasks[0].Services[0].PortLabel = port
	tg.Tasks[0].Services[0].Checks = []structs.ServiceCheck{{Name: "tcp", Type: "tcp", Interval: 20 * time.Millisecond, Timeout: time.Second}}
	cat := catalog.New()
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: allocdir.New(t.TempDir(), alloc.ID), Logger: hclog.NewNullLogger()}
	h := &ServicesHook{d: Deps{Catalog: cat, NodeID: "n1", Datacenter: "dc1"}}
	if err := h.Prerun(context.Background(), hc); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Postrun(context.Background(), hc) }()
	id := connect.TaskServiceID(alloc.ID, "web", "web-task", port)
	if _, ok := cat.Get(id); ok || len(cat.Service("grp")) != 1 {
		t.Fatalf("after Prerun: web-task registered %v, grp %d; want only the group service", ok, len(cat.Service("grp")))
	}
	h.TaskStateChanged(hc, "web", &structs.TaskState{State: structs.TaskStateRunning})
	if inst, ok := cat.Get(id); !ok || len(inst.Checks) != 1 {
		t.Fatalf("web running: web-task %+v, registered %v; want it with its check", inst, ok)
	}
	h.TaskStateChanged(hc, "web", &structs.TaskState{State: structs.TaskStatePending, Restarts: 1})
	time.Sleep(200 * time.Millisecond) // several check runs
	if _, ok := cat.Get(id); ok {
		t.Fatal("web-task registered while web waits to restart")
	}
	h.TaskStateChanged(hc, "web", &structs.TaskState{State: structs.TaskStateRunning, Restarts: 1})
	testutil.WaitFor(t, hang, "web-task back, its check critical (nothing listens)", func() bool {
		inst, ok := cat.Get(id)
		return ok && !inst.Healthy && len(inst.Checks) == 1 && inst.Checks[0].Status == "critical"
	})
	h.PreKill(context.Background(), hc)
	h.TaskStateChanged(hc, "web", &structs.TaskState{State: structs.TaskStateRunning, Restarts: 1})
	if n := len(cat.All()); n != 0 {
		t.Fatalf("%d instances registered after PreKill", n)
	}
}
