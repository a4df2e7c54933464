package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// fastHeartbeats are heartbeat settings for tests: a node is down 300 ms
// after its last heartbeat.
var fastHeartbeats = Config{MinHeartbeatTTL: 200 * time.Millisecond, HeartbeatGrace: 100 * time.Millisecond,
	FailoverHeartbeatTTL: 300 * time.Millisecond}

func registerNode(t *testing.T, s *Server, id string) {
	t.Helper()
	n := &structs.Node{ID: id, Name: id, Datacenter: "dc1", Status: structs.NodeStatusReady,
		Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// keepAlive heartbeats node id until the test ends.
func keepAlive(t *testing.T, s *Server, id string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ttl, err := s.Heartbeat(ctx, id)
			if err != nil {
				ttl = 2 * time.Millisecond
			}
			select {
			case <-ctx.Done():
			case <-time.After(ttl / 3):
			}
		}
	}()
}

// expireHeartbeat runs the node's heartbeat deadline now, as its timer
// firing would.
func expireHeartbeat(s *Server, nodeID string) {
	s.mu.Lock()
	t := s.heartbeats[nodeID]
	s.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	s.heartbeatMissed(nodeID, t)
}

func nodeStatus(t *testing.T, s *Server, id string) string {
	t.Helper()
	n, err := s.store.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return n.Status
}

// TestSilentNodeGoesDownAndItsAllocsAreReplaced: a node that stops
// heartbeating is marked down after its TTL and grace; its allocations are
// lost and placed again on the live node; when it heartbeats again it is
// ready and what was replaced stays stopped on it.
func TestSilentNodeGoesDownAndItsAllocsAreReplaced(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, openStore(t), fastHeartbeats) // node-1, silent from now on
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 2)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.store.AllocsByNode("node-1")
	if len(before) != 2 {
		t.Fatalf("node-1 has %d allocations, want 2", len(before))
	}
	registerNode(t, s, "node-2")
	keepAlive(t, s, "node-2")

	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for nodeStatus(t, s, "node-1") != structs.NodeStatusDown {
		if time.Now().After(deadline) {
			t.Fatal("node-1 was not marked down 5 s after its last heartbeat")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("node-1 was marked down after %s, before its TTL and grace (300 ms) ran out", took)
	}
	if got := nodeStatus(t, s, "node-2"); got != structs.NodeStatusReady {
		t.Errorf("node-2 (heartbeating) is %q, want ready", got)
	}
	// The node's jobs are evaluated right after it is marked down.
	lostAndReplaced := func() string {
		for _, old := range before {
			a, err := s.store.Alloc(old.ID)
			if err != nil {
				return err.Error()
			}
			if a.ClientStatus != structs.AllocClientStatusLost || a.DesiredStatus != structs.AllocDesiredStatusStop {
				return fmt.Sprintf("alloc %s on the down node: client %q desired %q, want lost/stop", a.ID, a.ClientStatus, a.DesiredStatus)
			}
		}
		live, _ := s.store.AllocsByNode("node-2")
		if running := countDesiredRun(live); running != 2 {
			return fmt.Sprintf("node-2 has %d allocations to run, want the 2 replacements", running)
		}
		return ""
	}
	for why := lostAndReplaced(); why != ""; why = lostAndReplaced() {
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// node-1 comes back: ready, and its replaced allocations stay stopped.
	if _, err := s.Heartbeat(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if got := nodeStatus(t, s, "node-1"); got != structs.NodeStatusReady {
		t.Errorf("node-1 after a heartbeat is %q, want ready", got)
	}
	back, _ := s.store.AllocsByNode("node-1")
	if n := countDesiredRun(back); n != 0 {
		t.Errorf("node-1 has %d allocations to run after coming back, want 0 (they were replaced)", n)
	}
	all, _ := s.store.AllocsByJob("web")
	if n := countDesiredRun(all); n != 2 {
		t.Errorf("job web has %d allocations to run, want 2: nothing runs twice", n)
	}
}

func countDesiredRun(allocs []*structs.Allocation) int {
	n := 0
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun {
			n++
		}
	}
	return n
}

func TestHeartbeatOfUnknownNode(t *testing.T) {
	s := startServer(t, openStore(t), fastHeartbeats)
	_, err := s.Heartbeat(context.Background(), "nope")
	if !errors.Is(err, structs.ErrUnknownNode) {
		t.Fatalf("heartbeat of an unknown node: %v, want ErrUnknownNode", err)
	}
}

// TestHeartbeatTTLScalesWithNodes: with more nodes than the heartbeat rate
// allows per minimum TTL, the TTL grows (Nomad's max_heartbeats_per_second).
func TestHeartbeatTTLScalesWithNodes(t *testing.T) {
	cfg := fastHeartbeats
	cfg.MaxHeartbeatsPerSecond = 10
	s := startServer(t, openStore(t), cfg)
	for i := range 30 {
		s.armHeartbeat(string(rune('a'+i)), time.Hour)
	}
	if ttl := s.heartbeatTTL(); ttl < 3*time.Second {
		t.Errorf("TTL with 31 nodes at 10 heartbeats/s = %s, want >= 3 s", ttl)
	}
}

// TestNodeDownHookAfterStatusStored: the mesh's NodeDown hook runs once
// per down transition, and only once the down status is stored.
func TestNodeDownHookAfterStatusStored(t *testing.T) {
	cfg := fastHeartbeats
	calls := make(chan string, 4)
	st := openStore(t)
	cfg.NodeDown = func(id string) {
		status := "?"
		if n, err := st.Node(id); err == nil {
			status = n.Status
		}
		calls <- id + " " + status
	}
	startServer(t, st, cfg) // node-1, silent from now on
	select {
	case got := <-calls:
		if got != "node-1 "+structs.NodeStatusDown {
			t.Fatalf("NodeDown saw %q, want node-1 already stored down", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NodeDown not called for a node that stopped heartbeating")
	}
	select {
	case got := <-calls:
		t.Fatalf("NodeDown called again: %q", got)
	case <-time.After(500 * time.Millisecond):
	}
}

// A job stopped (or purged) while its node is silent: when the node is
// marked down, the allocations it never reported stopped are lost, the
// stopped job is dead, and garbage collection removes them (the purged
// job's at once), as Nomad does.
func TestStoppedAllocsOnDownNodeAreLost(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	cfg := fastHeartbeats // the heartbeat timers run on the real clock
	cfg.Now, cfg.AllocGCThreshold, cfg.GCInterval = clock.Now, time.Hour, 100*time.Hour
	s := startServer(t, st, cfg) // node-1 never heartbeats
	for _, id := range []string{"web", "api"} {
		if _, err := s.RegisterJob(ctx, testJob(id, "raw_exec", 1)); err != nil {
			t.Fatal(err)
		}
		a, _ := s.JobAllocs(ctx, id)
		setClientStatus(t, s, structs.AllocClientStatusRunning, a...)
	}
	if _, err := s.StopJob(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopJob(ctx, "api", true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "node-1 down", func() bool { return nodeStatus(t, s, "node-1") == structs.NodeStatusDown })
	testutil.WaitFor(t, 5*time.Second, "web's allocation lost", func() bool {
		a, _ := s.JobAllocs(ctx, "web")
		return len(a) == 1 && a[0].ClientStatus == structs.AllocClientStatusLost
	})
	if job, err := s.Job(ctx, "web"); err != nil || job.Status != structs.JobStatusDead {
		t.Fatalf("stopped job on a down node: %+v, %v; want dead", job, err)
	}
	// The purged job's allocation goes at once; the stopped job's waits
	// for AllocGCThreshold.
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if all, _ := st.Allocs(); len(all) != 1 || all[0].JobID != "web" {
		t.Fatalf("before AllocGCThreshold, GC left %d allocations (%v), want only web's", len(all), allocIDs(t, st))
	}
	clock.Advance(time.Hour)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if all, _ := st.Allocs(); len(all) != 0 {
		t.Fatalf("%d allocations of stopped and purged jobs on a down node left after GC: %+v", len(all), all[0])
	}
}

// gateStore holds the first Node read after arm until release: a status
// change read the node, then something else commits.
type gateStore struct {
	state.Store
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

func (g *gateStore) Node(id string) (*structs.Node, error) {
	n, err := g.Store.Node(id)
	g.mu.Lock()
	hold := g.armed
	g.armed = false
	g.mu.Unlock()
	if hold {
		close(g.reached)
		<-g.release
	}
	return n, err
}

// A heartbeat of a down node changes only its status: a registration
// committed between the heartbeat's read and its write (a new driver) is
// kept, not overwritten with the heartbeat's copy.
func TestHeartbeatKeepsConcurrentRegistration(t *testing.T) {
	ctx := context.Background()
	g := &gateStore{Store: openStore(t), reached: make(chan struct{}), release: make(chan struct{})}
	s := startServer(t, g, Config{})
	n, _ := g.Store.Node("node-1")
	n.Status = structs.NodeStatusDown
	if _, err := g.Store.UpsertNode(n); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := s.Heartbeat(ctx, "node-1"); done <- err }()
	<-g.reached
	re := &structs.Node{ID: "node-1", Name: "n1", Datacenter: "dc1", Status: structs.NodeStatusReady,
		Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}, "docker": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(ctx, re); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := g.Store.Node("node-1"); got.Drivers["docker"] == nil || got.Status != structs.NodeStatusReady {
		t.Fatalf("node after the heartbeat: drivers %v status %s; want the registration's docker, ready", got.Drivers, got.Status)
	}
}

// A deadline that fired just before a heartbeat was taken (its timer is
// no longer the node's) does not mark the node down.
func TestLateDeadlineAfterHeartbeatKeepsNodeReady(t *testing.T) {
	s := startServer(t, openStore(t), Config{})
	s.mu.Lock()
	fired := s.heartbeats["node-1"]
	s.mu.Unlock()
	fired.Stop()
	if _, err := s.Heartbeat(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	s.heartbeatMissed("node-1", fired)
	if st := nodeStatus(t, s, "node-1"); st != structs.NodeStatusReady {
		t.Fatalf("node status %s after a stale deadline, want ready", st)
	}
	s.mu.Lock()
	_, armed := s.heartbeats["node-1"]
	s.mu.Unlock()
	if !armed {
		t.Fatal("the stale deadline dropped the node's current heartbeat timer")
	}
}

// downGate holds the first write of a node marked down until release.
type downGate struct {
	state.Store
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

func (g *downGate) UpsertNode(n *structs.Node) (uint64, error) {
	g.mu.Lock()
	hold := g.armed && n.Status == structs.NodeStatusDown
	g.armed = g.armed && !hold
	g.mu.Unlock()
	if hold {
		close(g.reached)
		<-g.release
	}
	return g.Store.UpsertNode(n)
}

// A heartbeat taken while a missed deadline's down write is in flight
// leaves the node ready: the write, seeing the heartbeat's arming after
// it, sets the node ready again instead of leaving it down.
func TestHeartbeatDuringDownWriteLeavesNodeReady(t *testing.T) {
	g := &downGate{Store: openStore(t), armed: true, reached: make(chan struct{}), release: make(chan struct{})}
	s := startServer(t, g, Config{})
	missed := make(chan struct{})
	go func() { expireHeartbeat(s, "node-1"); close(missed) }()
	<-g.reached // the deadline's checks passed; its write is in flight
	// The whole heartbeat runs during the write (it reads the node still
	// ready and writes nothing): only the write's own re-check can undo
	// the down status. A heartbeat that came after the write would set
	// the node ready itself, and pass with or without that re-check.
	beat := make(chan error, 1)
	go func() { _, err := s.Heartbeat(context.Background(), "node-1"); beat <- err }()
	select {
	case err := <-beat:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat waited for the down write")
	}
	close(g.release)
	<-missed
	if st := nodeStatus(t, s, "node-1"); st != structs.NodeStatusReady {
		t.Fatalf("node status %s after a heartbeat accepted during the down write, want ready", st)
	}
}

// A job stopped after its node is already down: its allocations there are
// lost at once (the node will never report the stop), so the job is dead.
func TestJobStoppedOnDownNodeIsDead(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, openStore(t), Config{})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	a, _ := s.JobAllocs(ctx, "web")
	setClientStatus(t, s, structs.AllocClientStatusRunning, a...)
	n, _ := s.store.Node("node-1")
	n.Status = structs.NodeStatusDown // down without its allocations noticed (as before the job's evaluation)
	if _, err := s.store.UpsertNode(n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopJob(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	if job, err := s.Job(ctx, "web"); err != nil || job.Status != structs.JobStatusDead {
		t.Fatalf("job stopped on a down node: %+v, %v; want dead", job, err)
	}
	if a, _ := s.JobAllocs(ctx, "web"); len(a) != 1 || a[0].ClientStatus != structs.AllocClientStatusLost {
		t.Fatalf("allocation = %+v, want lost", a[0])
	}
}
