package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/structs"
)

// gcRecorder is a Networker that records garbage collections (their
// liveness functions).
type gcRecorder struct {
	mu  sync.Mutex
	gcs []func(string) bool
}

func (g *gcRecorder) Setup(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	return &structs.AllocNetworkStatus{}, nil
}
func (g *gcRecorder) Restore(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	return &structs.AllocNetworkStatus{}, nil
}
func (g *gcRecorder) Teardown(context.Context, *structs.Allocation) error { return nil }
func (g *gcRecorder) NetNSPath(string) string                             { return "" }
func (g *gcRecorder) GC(_ context.Context, live func(string) bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gcs = append(g.gcs, live)
	return nil
}

func (g *gcRecorder) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.gcs)
}

// TestLostClientStateRefusesToStart: after the client state of a node with
// a running allocation is deleted (or emptied), the next agent refuses to
// start with a one-line error naming the file, before registering a node or
// garbage-collecting networks as leaked; the tasks keep running.
func TestLostClientStateRefusesToStart(t *testing.T) {
	for _, how := range []string{"deleted", "emptied", "deleted with its marker"} {
		t.Run(how, func(t *testing.T) {
			srv := newServer(t)
			drv := fakedriver.New("raw_exec")
			dir := t.TempDir()
			c := newClient(t, srv, dir, drv)
			if _, err := srv.RegisterJob(context.Background(), job("a", "")); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
			if err := c.Shutdown(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "client", "state.db")
			switch how {
			case "deleted":
				must(t, os.Remove(path))
			case "emptied":
				must(t, os.Truncate(path, 0))
			default:
				must(t, os.Remove(path))
				must(t, os.Remove(clientstate.MarkerPath(path)))
			}
			gc := &gcRecorder{}
			c2, err := New(Config{DataDir: dir, NodeName: "n1", Drivers: []driver.Driver{drv}, Server: srv, Networker: gc})
			if err == nil {
				_ = c2.Start()
				_ = c2.Shutdown()
				t.Fatal("a client with lost state started")
			}
			if !errors.Is(err, clientstate.ErrStateLost) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "state.db") {
				t.Fatalf("err = %q, want one line ErrStateLost naming state.db", err)
			}
			nodes, _ := srv.Nodes(context.Background())
			if gc.count() != 0 || len(nodes) != 1 || len(drv.Running()) != 1 {
				t.Fatalf("gc runs %d, nodes %d, running tasks %d", gc.count(), len(nodes), len(drv.Running()))
			}
		})
	}
}

// TestUnrestorableAllocationDefersNetworkGC: an allocation that cannot be
// restored is missing from the live set, so the network GC (which would
// tear its network down as leaked) and the driver sweep do not run at
// start. That covers a record that cannot be turned into a runner, and an
// entry with task state but no record (its write failed after the tasks
// started). Once the servers list the node's allocations without it, its
// entry is forgotten and both run: before, they stayed off at every start
// for as long as the entry lasted, which was for ever.
func TestUnrestorableAllocationDefersNetworkGC(t *testing.T) {
	for name, damage := range map[string]func(db *clientstate.DB) error{
		"broken": func(db *clientstate.DB) error {
			return db.PutAlloc(&structs.Allocation{ID: "broken", JobID: "gone"}) // a record without its job
		},
		"recordless": func(db *clientstate.DB) error {
			return db.PutTaskState("recordless", "web", &clientstate.LocalTaskState{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t)
			dir := t.TempDir()
			db, err := clientstate.Open(filepath.Join(dir, "client", "state.db"))
			must(t, err)
			must(t, db.PutNodeID("n-test"))
			must(t, damage(db))
			must(t, db.Close())
			gc := &hungGC{release: make(chan struct{})}
			sw := &sweeper{Driver: fakedriver.New("raw_exec"), ask: []string{name}}
			c, err := New(Config{DataDir: dir, NodeName: "n1", Drivers: []driver.Driver{sw}, Server: srv, Networker: gc})
			must(t, err)
			must(t, c.Start())
			defer c.Shutdown()
			sw.mu.Lock()
			swept := sw.calls
			sw.mu.Unlock()
			if swept != 0 {
				t.Fatalf("drivers swept %d times at start with an allocation not restored", swept)
			}
			close(gc.release)
			testutil.WaitFor(t, hang, "network GC once the servers listed the node's allocations", func() bool { return gc.count() == 1 })
			sw.mu.Lock()
			defer sw.mu.Unlock()
			if live := gc.gcs[0]; live(name) || sw.calls != 1 || sw.seen[name] {
				t.Fatalf("after the servers' list: %s live for the GC %v, sweeps %d, known to the sweep %v", name, live(name), sw.calls, sw.seen[name])
			}
			allocs, orphans, err := c.db.AllocsAndOrphans()
			if err != nil || len(allocs)+len(orphans) != 0 {
				t.Fatalf("client state still holds %d allocations and %v (err %v); the entry should be forgotten", len(allocs), orphans, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnrestorableAllocationReattachesItsTasks: an allocation whose local
// record cannot be restored (here it lost its job) but whose tasks still
// run is taken from the server again and re-attached to its tasks, not
// started a second time beside them.
func TestUnrestorableAllocationReattachesItsTasks(t *testing.T) {
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	dir := t.TempDir()
	c := newClient(t, srv, dir, drv)
	if _, err := srv.RegisterJob(context.Background(), job("a", "")); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	must(t, c.Shutdown())
	db, err := clientstate.Open(filepath.Join(dir, "client", "state.db"))
	must(t, err)
	broken := *alloc
	broken.Job = nil
	must(t, db.PutAlloc(&broken))
	must(t, db.Close())

	c = newClient(t, srv, dir, drv)
	defer c.Shutdown()
	testutil.WaitFor(t, hang, "the allocation taken from the server", func() bool { return c.runner(alloc.ID) != nil })
	calls := func() string { return strings.Join(drv.Calls(), ",") }
	testutil.WaitFor(t, hang, "its task re-attached or started again", func() bool {
		return strings.Contains(calls(), "Recover t") || strings.Count(calls(), "Start t") > 1
	})
	if n := strings.Count(calls(), "Start t"); n != 1 || len(drv.Running()) != 1 || !strings.Contains(calls(), "Recover t") {
		t.Fatalf("task started %d times, %d running (calls %s); want the running one re-attached", n, len(drv.Running()), calls())
	}
}

// sweeper is a fake driver that records what its Sweep was told.
type sweeper struct {
	driver.Driver
	mu    sync.Mutex
	calls int
	seen  map[string]bool
	ask   []string
}

func (s *sweeper) Sweep(_ context.Context, known func(string) bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.seen = map[string]bool{}
	for _, id := range s.ask {
		s.seen[id] = known(id)
	}
	return 0, nil
}

// TestStartSweepsDrivers: at start, after restoring, drivers that sweep
// are told which allocations the client still has: a restored one is
// known, one it never heard of is not.
func TestStartSweepsDrivers(t *testing.T) {
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	dir := t.TempDir()
	c := newClient(t, srv, dir, drv)
	if _, err := srv.RegisterJob(context.Background(), job("a", "")); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	must(t, c.Shutdown())
	sw := &sweeper{Driver: drv, ask: []string{alloc.ID, "gone-alloc"}}
	c2, err := New(Config{DataDir: dir, NodeName: "n1", Drivers: []driver.Driver{sw}, Server: srv, Networker: &gcRecorder{}})
	must(t, err)
	must(t, c2.Start())
	defer c2.Shutdown()
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.calls != 1 || !sw.seen[alloc.ID] || sw.seen["gone-alloc"] {
		t.Fatalf("sweep calls %d, known %v", sw.calls, sw.seen)
	}
}

// hungGC is a Networker whose GC hangs, like a CNI DEL stuck on a plugin,
// until its context ends or the test releases it.
type hungGC struct {
	gcRecorder
	release chan struct{}
}

func (h *hungGC) GC(ctx context.Context, live func(string) bool) error {
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.gcRecorder.GC(ctx, live)
}

// TestHungNetworkGCHoldsNoStart: a network GC that hangs holds up
// neither the node's registration (the servers would take it for down)
// nor the allocations placed meanwhile, which start at once: the GC asks
// the client whether each allocation is live when it gets to it, and an
// allocation placed meanwhile is, as is one the servers forgot while its
// tasks are still stopping.
func TestHungNetworkGCHoldsNoStart(t *testing.T) {
	srv := newServer(t)
	gc := &hungGC{release: make(chan struct{})}
	conn := &hidingConn{Server: srv, hidden: map[string]bool{}}
	c, err := New(Config{DataDir: t.TempDir(), NodeName: "n1", Drivers: []driver.Driver{fakedriver.New("raw_exec")}, Server: conn, Networker: gc})
	must(t, err)
	c.networkGCTimeout = time.Minute
	done := make(chan error, 1)
	go func() { done <- c.Start() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(hang):
		close(gc.release)
		<-done
		t.Fatal("Start waited for the hung network GC: the node was not registered meanwhile")
	}
	defer c.Shutdown()
	if nodes, err := srv.Nodes(context.Background()); err != nil || len(nodes) != 1 {
		t.Fatalf("nodes = %v, %v; want the node registered while the GC hangs", nodes, err)
	}
	j := job("a", "")
	j.TaskGroups[0].Tasks[0].ShutdownDelay = 3 * time.Second
	if _, err := srv.RegisterJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	alloc := waitStatus(t, srv, "a", structs.AllocClientStatusRunning)
	close(gc.release)
	testutil.WaitFor(t, hang, "network GC", func() bool { return gc.count() == 1 })
	live := gc.gcs[0]
	if !live(alloc.ID) || live("gone-alloc") {
		t.Fatalf("GC liveness: placed allocation %v, unknown one %v", live(alloc.ID), live("gone-alloc"))
	}
	// The servers forget it (the next change they send lacks it): its
	// runner is destroyed, the task first stopped through its delay.
	conn.hide(alloc.ID)
	if _, err := srv.RegisterJob(context.Background(), job("b", "")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "runner removed", func() bool { return c.runner(alloc.ID) == nil })
	if !live(alloc.ID) {
		t.Fatal("an allocation being destroyed, its task in its shutdown_delay, is not live for the GC")
	}
	testutil.WaitFor(t, hang, "destroyed", func() bool { return !live(alloc.ID) })
}

// hidingConn is a server connection that leaves the hidden allocations
// out of the node's allocations, as servers that forgot them.
type hidingConn struct {
	*server.Server
	mu     sync.Mutex
	hidden map[string]bool
}

func (h *hidingConn) hide(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hidden[id] = true
}

func (h *hidingConn) NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error) {
	allocs, idx, err := h.Server.NodeAllocs(ctx, nodeID, minIndex)
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.DeleteFunc(allocs, func(a *structs.Allocation) bool { return h.hidden[a.ID] }), idx, err
}

// TestReplacementWaitsForForgottenPrevious: a replacement waits for the
// allocation it replaces even when the servers forgot that one in the same
// change, so its runner is being destroyed (its task still in its
// shutdown_delay) rather than listed among the client's runners.
func TestReplacementWaitsForForgottenPrevious(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	conn := &hidingConn{Server: srv, hidden: map[string]bool{}}
	c, err := New(Config{DataDir: t.TempDir(), NodeName: "n1", Drivers: []driver.Driver{drv}, Server: conn})
	must(t, err)
	must(t, c.Start())
	defer c.Shutdown()
	j := job("r", "")
	j.TaskGroups[0].Tasks[0].ShutdownDelay = 2 * time.Second
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	prev := waitStatus(t, srv, "r", structs.AllocClientStatusRunning)
	conn.hide(prev.ID)
	j2 := job("r", "")
	j2.TaskGroups[0].Tasks[0].ShutdownDelay = 2 * time.Second
	j2.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, err := srv.RegisterJob(ctx, j2); err != nil {
		t.Fatal(err)
	}
	var next *structs.Allocation
	testutil.WaitFor(t, hang, "replacement placed", func() bool {
		next = allocOf(t, srv, "r")
		return next.ID != prev.ID
	})
	if next.PreviousAllocation != prev.ID {
		t.Fatalf("replacement's previous allocation = %q, want %q", next.PreviousAllocation, prev.ID)
	}
	testutil.WaitFor(t, hang, "replacement started", func() bool { return strings.Count(strings.Join(drv.Calls(), ","), "Start t") == 2 })
	if calls := strings.Join(drv.Calls(), ","); !strings.HasPrefix(calls, "Start t,Stop t") || !strings.HasSuffix(calls, ",Start t") {
		t.Fatalf("calls = %s; want the forgotten allocation's task stopped before the replacement's started", calls)
	}
}
