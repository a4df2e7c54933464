package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// registry stands for the catalog: the allocations whose services are
// registered.
type registry struct {
	mu     sync.Mutex
	allocs map[string]bool
}

func (r *registry) set(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allocs[id] = on
}

func (r *registry) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.allocs[id]
}

// servicesHook registers the allocation's services in Prerun and
// deregisters them in Postrun. With stall set, Postrun blocks before its
// work until the test ends: the agent died there.
type servicesHook struct {
	reg            *registry
	stall, stalled chan struct{}
}

func (h *servicesHook) Name() string { return "services" }
func (h *servicesHook) Prerun(_ context.Context, hc *allocrunner.AllocHookContext) error {
	h.reg.set(hc.Alloc.ID, true)
	return nil
}
func (h *servicesHook) Postrun(_ context.Context, hc *allocrunner.AllocHookContext) error {
	if h.stall != nil {
		close(h.stalled)
		<-h.stall
		return nil
	}
	h.reg.set(hc.Alloc.ID, false)
	return nil
}
func (h *servicesHook) Destroy(context.Context, *allocrunner.AllocHookContext) error { return nil }

func startClientWithHook(t *testing.T, srv ServerConn, dir string, drv driver.Driver, h allocrunner.AllocHook) *Client {
	t.Helper()
	c, err := New(Config{DataDir: dir, NodeName: "n1", Drivers: []driver.Driver{drv}, Server: srv, Version: "test",
		BinaryPath: "/usr/bin/meshlet", NetworkUnavailable: "no CNI in unit tests",
		Hooks: func(*structs.Allocation) []allocrunner.AllocHook { return []allocrunner.AllocHook{h} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// The agent dies after every task of an allocation died and before its
// postrun hooks ran; the next agent restores it from the client state and
// runs them, so its services stop advertising a dead endpoint (before,
// they stayed registered until the allocation was garbage collected).
func TestRestoreRunsPostrunTheDeadAgentMissed(t *testing.T) {
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	drv.Script("t", fakedriver.Behavior{ExitAfter: 50 * time.Millisecond})
	dir := t.TempDir()
	reg := &registry{allocs: map[string]bool{}}
	dying := &servicesHook{reg: reg, stall: make(chan struct{}), stalled: make(chan struct{})}
	c := startClientWithHook(t, srv, dir, drv, dying)
	j := job("b", "")
	j.Type = structs.JobTypeBatch
	if _, err := srv.RegisterJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dying.stalled:
	case <-time.After(hang):
		t.Fatal("the allocation's postrun never began")
	}
	// The agent dies: its loops stop and its state file is closed, with
	// no shutdown (which would wait for the postrun).
	c.cancel()
	c.wg.Wait()
	if err := c.db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(dying.stall) })
	l, err := srv.JobAllocs(context.Background(), "b")
	if err != nil || len(l) != 1 || !reg.has(l[0].ID) {
		t.Fatalf("allocations %v, %v; want one, registered", l, err)
	}

	c2 := startClientWithHook(t, srv, dir, drv, &servicesHook{reg: reg})
	defer c2.Shutdown()
	testutil.WaitFor(t, hang, "the restored terminal allocation's services deregistered", func() bool { return !reg.has(l[0].ID) })
	if n := len(drv.Calls()); n != 1 {
		t.Errorf("driver calls after the restore: %v, want the first start only", drv.Calls())
	}
}
