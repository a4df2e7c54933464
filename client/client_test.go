package client

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

const hang = 10 * time.Second

func newServer(t *testing.T) *server.Server {
	t.Helper()
	st, err := state.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sched, err := scheduler.New(scheduler.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: st, Scheduler: sched})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func newClient(t *testing.T, srv *server.Server, dir string, drv driver.Driver) *Client {
	t.Helper()
	c, err := New(Config{DataDir: dir, NodeName: "n1", Drivers: []driver.Driver{drv}, Server: srv, Version: "test",
		BinaryPath: "/usr/bin/meshlet", NetworkUnavailable: "no CNI in unit tests"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func job(id string, mode string) *structs.Job {
	j := &structs.Job{ID: id, Name: id, Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Tasks: []*structs.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "${attr.meshlet.binary}"}}}}}}
	if mode != "" {
		j.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: mode}}
	}
	return j
}

func allocOf(t *testing.T, srv *server.Server, jobID string) *structs.Allocation {
	t.Helper()
	allocs, err := srv.JobAllocs(context.Background(), jobID)
	if err != nil || len(allocs) == 0 {
		return &structs.Allocation{}
	}
	return allocs[len(allocs)-1]
}

func waitStatus(t *testing.T, srv *server.Server, jobID, status string) *structs.Allocation {
	t.Helper()
	testutil.WaitFor(t, hang, jobID+" "+status, func() bool { return allocOf(t, srv, jobID).ClientStatus == status })
	return allocOf(t, srv, jobID)
}

func TestFingerprintAndNodeIDPersist(t *testing.T) {
	srv := newServer(t)
	dir := t.TempDir()
	c := newClient(t, srv, dir, fakedriver.New("raw_exec"))
	n := c.Node()
	for k, want := range map[string]string{"kernel.name": "linux", "meshlet.binary": "/usr/bin/meshlet", "meshlet.version": "test",
		"driver.raw_exec": "1", "driver.raw_exec.version": "fake", "unique.network.ip-address": "127.0.0.1"} {
		if n.Attributes[k] != want {
			t.Errorf("attr %s = %q, want %q", k, n.Attributes[k], want)
		}
	}
	if n.Attributes["unique.hostname"] == "" || !n.Drivers["raw_exec"].Healthy || n.Datacenter != "dc1" || n.Name != "n1" {
		t.Errorf("node = %+v", n)
	}
	if stored, err := srv.Node(context.Background(), n.ID); err != nil || stored.Name != "n1" {
		t.Fatalf("node not registered: %v", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, srv, dir, fakedriver.New("raw_exec"))
	defer c2.Shutdown()
	if c2.Node().ID != n.ID {
		t.Fatalf("node ID not persisted: %s vs %s", c2.Node().ID, n.ID)
	}
}

func TestRunStopPurgeAndRestore(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	dir := t.TempDir()
	c := newClient(t, srv, dir, drv)
	if _, err := srv.RegisterJob(ctx, job("a", "")); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	if alloc.TaskStates["t"] == nil || alloc.TaskStates["t"].State != structs.TaskStateRunning {
		t.Fatalf("task states = %+v", alloc.TaskStates)
	}
	ls, _ := c.db.TaskStates(alloc.ID)
	if ls["t"].Handle.Config.Config["command"] != "/usr/bin/meshlet" {
		t.Fatalf("attr interpolation: %v", ls["t"].Handle.Config.Config)
	}
	// Exec through the driver; unknown task and alloc are clear errors.
	var out strings.Builder
	if code, err := c.ExecTask(ctx, alloc.ID, "t", &driver.ExecOptions{Command: []string{"echo", "hi"}, Stdout: &out}); err != nil || code != 0 || out.String() != "[echo hi]" {
		t.Fatalf("exec: %d %v %q", code, err, out.String())
	}
	for _, tc := range []struct{ alloc, task string }{{alloc.ID, "nope"}, {"nope", "t"}} {
		if _, err := c.ExecTask(ctx, tc.alloc, tc.task, &driver.ExecOptions{Command: []string{"x"}}); err == nil {
			t.Errorf("exec in %s/%s succeeded", tc.alloc, tc.task)
		}
	}

	// Agent restart: a new client on the same data dir recovers the task.
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if len(drv.Running()) != 1 {
		t.Fatal("shutdown stopped the task")
	}
	c = newClient(t, srv, dir, drv)
	testutil.WaitFor(t, hang, "recovery", func() bool { return strings.Contains(strings.Join(drv.Calls(), ","), "Recover t") })
	if n := strings.Count(strings.Join(drv.Calls(), ","), "Start t"); n != 1 {
		t.Fatalf("task started %d times", n)
	}

	// Purge: the allocation is stopped, then removed from server and client.
	if _, err := srv.StopJob(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "purged allocation removed", func() bool {
		allocs, _ := srv.Allocs(ctx)
		local, _ := c.db.Allocs()
		return len(allocs) == 0 && len(local) == 0 && c.runner(alloc.ID) == nil
	})
	if len(drv.Running()) != 0 || c.allocDir(alloc.ID).Exists() {
		t.Fatal("purge left the task or alloc dir behind")
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

func TestBridgeWithoutNetworkerFailsClearly(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv, t.TempDir(), fakedriver.New("raw_exec"))
	defer c.Shutdown()
	if _, err := srv.RegisterJob(context.Background(), job("b", "bridge")); err != nil {
		t.Fatal(err)
	}
	a := waitStatus(t, srv, "b", structs.AllocClientStatusFailed)
	if !strings.Contains(a.ClientDescription, `network mode "bridge" needs CNI networking, which is not available on this node: no CNI in unit tests`) {
		t.Fatalf("description = %q", a.ClientDescription)
	}
}

func TestReplacementWaitsForPrevious(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	c := newClient(t, srv, t.TempDir(), drv)
	defer c.Shutdown()
	if _, err := srv.RegisterJob(ctx, job("r", "")); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, srv, "r", structs.AllocClientStatusRunning)
	j := job("r", "")
	j.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "replacement running", func() bool {
		allocs, _ := srv.JobAllocs(ctx, "r")
		return len(allocs) == 2 && allocs[0].ClientStatus == structs.AllocClientStatusComplete &&
			allocs[1].ClientStatus == structs.AllocClientStatusRunning
	})
	calls := strings.Join(drv.Calls(), ",")
	if !strings.HasPrefix(calls, "Start t,Stop t") || !strings.HasSuffix(calls, "Start t") {
		t.Fatalf("old task not stopped before the new one started: %s", calls)
	}
}

// TestRestartTaskForCheck: RestartTask (check_restart) stops the running
// task with a "Restart Signaled" event carrying the reason, and the task's
// restart policy starts it again.
func TestRestartTaskForCheck(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	c := newClient(t, srv, t.TempDir(), drv)
	defer c.Shutdown()
	j := job("a", "")
	delay, attempts, interval, mode := 10*time.Millisecond, 2, time.Minute, "fail"
	j.TaskGroups[0].RestartPolicy = &structs.RestartPolicy{Delay: &delay, Attempts: &attempts, Interval: &interval, Mode: &mode}
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	if err := c.RestartTask(ctx, alloc.ID, "t", "check \"alive\" unhealthy"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "the task started again", func() bool {
		return strings.Count(strings.Join(drv.Calls(), ","), "Start t") == 2 && len(drv.Running()) == 1
	})
	var signaled bool
	for _, e := range c.runner(alloc.ID).ClientView().TaskStates["t"].Events {
		signaled = signaled || (e.Type == structs.TaskRestartSignal && strings.Contains(e.DisplayMessage, "unhealthy"))
	}
	if !signaled {
		t.Errorf("no %q event with the reason: %+v", structs.TaskRestartSignal, c.runner(alloc.ID).ClientView().TaskStates["t"].Events)
	}
	if err := c.RestartTask(ctx, alloc.ID, "nope", "x"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("restart of an unknown task: %v", err)
	}
}

// TestRestartAllMainTasks: RestartTask with task "" (a group check's
// check_restart naming no task) restarts every running task of the
// allocation but its sidecars.
func TestRestartAllMainTasks(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	c := newClient(t, srv, t.TempDir(), drv)
	defer c.Shutdown()
	j := job("m", "")
	delay, attempts, interval, mode := 10*time.Millisecond, 2, time.Minute, "fail"
	tg := j.TaskGroups[0]
	tg.RestartPolicy = &structs.RestartPolicy{Delay: &delay, Attempts: &attempts, Interval: &interval, Mode: &mode}
	cmd := map[string]any{"command": "${attr.meshlet.binary}"}
	tg.Tasks = append(tg.Tasks,
		&structs.Task{Name: "u", Driver: "raw_exec", Config: cmd},
		&structs.Task{Name: "side", Driver: "raw_exec", Config: cmd,
			Lifecycle: &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPrestart, Sidecar: true}})
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "m", structs.AllocClientStatusRunning)
	testutil.WaitFor(t, hang, "three tasks running", func() bool { return len(drv.Running()) == 3 })
	if err := c.RestartTask(ctx, alloc.ID, "", `healthcheck: check "web" unhealthy`); err != nil {
		t.Fatal(err)
	}
	count := func(task string) int { return strings.Count(strings.Join(drv.Calls(), ",")+",", "Start "+task+",") }
	testutil.WaitFor(t, hang, "the main tasks started again", func() bool {
		return count("t") == 2 && count("u") == 2 && len(drv.Running()) == 3
	})
	if n := count("side"); n != 1 {
		t.Fatalf("the sidecar started %d times, want once (not restarted)", n)
	}
}

// TestTaskStarted: what check_restart's grace runs from: a running task's
// latest start; an unknown task or allocation is not running.
func TestTaskStarted(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv, t.TempDir(), fakedriver.New("raw_exec"))
	defer c.Shutdown()
	before := time.Now()
	if _, err := srv.RegisterJob(context.Background(), job("a", "")); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	for _, task := range []string{"t", ""} {
		if at, running := c.TaskStarted(alloc.ID, task); !running || at.Before(before) || at.After(time.Now()) {
			t.Fatalf("task %q: started %v (test began %v), running %v", task, at, before, running)
		}
	}
	for _, tc := range []struct{ alloc, task string }{{alloc.ID, "nope"}, {"nope", "t"}} {
		if _, running := c.TaskStarted(tc.alloc, tc.task); running {
			t.Fatalf("%s/%s reported running", tc.alloc, tc.task)
		}
	}
}
