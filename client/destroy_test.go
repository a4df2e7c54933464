package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// Destroying an allocation the servers forgot waits for its stop
// (kill timeouts, poststop tasks) however long it takes, with no deadline
// after which its state would be deleted under a runner still at work.
// An agent that stops meanwhile stops the runner as on any shutdown and
// keeps the allocation's state for the next start, instead of waiting out
// the stop (or deleting the state after 5 minutes).
func TestDestroyOutlastedByShutdownKeepsState(t *testing.T) {
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	drv.Script("cleanup", fakedriver.Behavior{ExitAfter: 10 * time.Second})
	dir := t.TempDir()
	c := newClient(t, srv, dir, drv)
	j := job("a", "")
	j.TaskGroups[0].Tasks = append(j.TaskGroups[0].Tasks, &structs.Task{Name: "cleanup", Driver: "raw_exec",
		Config: map[string]any{"command": "/bin/true"}, Lifecycle: &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPoststop}})
	if _, err := srv.RegisterJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "the allocation running", func() bool { return allocOf(t, srv, "a").ClientStatus == structs.AllocClientStatusRunning })
	id := allocOf(t, srv, "a").ID
	// As the sync does for an allocation the servers no longer list.
	ar := c.runner(id)
	c.mu.Lock()
	delete(c.runners, id)
	c.mu.Unlock()
	c.wg.Add(1)
	go c.destroy(ar)
	testutil.WaitFor(t, hang, "the poststop task started", func() bool { return slices.Contains(drv.Calls(), "Start cleanup") })
	start := time.Now()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the shutdown waited %s for the destroy's poststop task", took)
	}
	c = newClient(t, srv, dir, drv)
	defer c.Shutdown()
	if local, err := c.db.Allocs(); err != nil || len(local) != 1 || local[0].ID != id {
		t.Fatalf("client state after a shutdown during the destroy: %v, %v; want the allocation kept", local, err)
	}
}

// A restored allocation whose status is failed while a task still runs
// (its siblings being stopped) is live: its network is kept.
func TestMayRun(t *testing.T) {
	st := func(state string, failed bool) *structs.TaskState {
		return &structs.TaskState{State: state, Failed: failed}
	}
	for _, tc := range []struct {
		status string
		tasks  map[string]*structs.TaskState
		want   bool
	}{
		{structs.AllocClientStatusPending, nil, true},
		{structs.AllocClientStatusRunning, map[string]*structs.TaskState{"a": st("running", false)}, true},
		{structs.AllocClientStatusFailed, map[string]*structs.TaskState{"a": st("dead", true), "b": st("running", false)}, true},
		{structs.AllocClientStatusFailed, map[string]*structs.TaskState{"a": st("dead", true), "b": st("dead", false)}, false},
		{structs.AllocClientStatusComplete, map[string]*structs.TaskState{"a": st("dead", false)}, false},
	} {
		if got := mayRun(&structs.Allocation{ClientStatus: tc.status, TaskStates: tc.tasks}); got != tc.want {
			t.Errorf("mayRun(%s, %v) = %v, want %v", tc.status, tc.tasks, got, tc.want)
		}
	}
}

// stuckHook's teardown never ends by itself.
type stuckHook struct{}

func (stuckHook) Name() string                                                 { return "stuck" }
func (stuckHook) Prerun(context.Context, *allocrunner.AllocHookContext) error  { return nil }
func (stuckHook) Postrun(context.Context, *allocrunner.AllocHookContext) error { return nil }
func (stuckHook) Destroy(ctx context.Context, _ *allocrunner.AllocHookContext) error {
	<-ctx.Done()
	return ctx.Err()
}

// A hook's teardown that hangs is given up after HookDestroyTimeout: the
// allocation is removed and the next ones can be collected.
func TestDestroyBoundsHookTeardown(t *testing.T) {
	old := allocrunner.HookDestroyTimeout
	allocrunner.HookDestroyTimeout = 200 * time.Millisecond
	t.Cleanup(func() { allocrunner.HookDestroyTimeout = old })
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	drv.Script("t", fakedriver.Behavior{ExitAfter: 20 * time.Millisecond})
	c := startClientWithHook(t, srv, t.TempDir(), drv, stuckHook{})
	defer c.Shutdown()
	j := job("b", "")
	j.Type = structs.JobTypeBatch
	ctx := context.Background()
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "the batch allocation complete", func() bool { return allocOf(t, srv, "b").ClientStatus == structs.AllocClientStatusComplete })
	if _, err := srv.StopJob(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "the purged allocation removed despite its stuck teardown", func() bool {
		local, _ := c.db.Allocs()
		return len(local) == 0
	})
}
