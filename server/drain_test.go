package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/structs"
)

func getNode(t *testing.T, s *Server, id string) *structs.Node {
	t.Helper()
	n, err := s.store.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNode polls the node until cond holds (drain checks run every second).
func waitNode(t *testing.T, s *Server, id, what string, cond func(*structs.Node) bool) *structs.Node {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := getNode(t, s, id)
		if cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: %s did not happen within 5 s (drain %v, strategy %+v)", id, what, n.Drain, n.DrainStrategy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// twoNodes starts a server whose node-1 runs job web (count 2), with
// node-2 registered after the placement; both heartbeat.
func twoNodes(t *testing.T) (*Server, []*structs.Allocation) {
	t.Helper()
	s := startServer(t, openStore(t), Config{})
	keepAlive(t, s, "node-1")
	if _, err := s.RegisterJob(context.Background(), testJob("web", "raw_exec", 2)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.store.AllocsByNode("node-1")
	if len(before) != 2 {
		t.Fatalf("node-1 has %d allocations, want 2", len(before))
	}
	setClientStatus(t, s, structs.AllocClientStatusRunning, before...)
	registerNode(t, s, "node-2")
	keepAlive(t, s, "node-2")
	return s, before
}

// TestDrainMigratesAllocsAndCompletes: draining node-1 replaces its two
// allocations on node-2 and stops the old ones as migrating; the drain
// completes once the client reports them complete, and node-1 stays
// ineligible.
func TestDrainMigratesAllocsAndCompletes(t *testing.T) {
	ctx := context.Background()
	s, before := twoNodes(t)
	start := time.Now()
	res, err := s.UpdateNodeDrain(ctx, "node-1", &structs.DrainSpec{Deadline: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.NodeID != "node-1" || len(res.EvalIDs) != 1 || res.NodeModifyIndex == 0 {
		t.Fatalf("drain result %+v, want node-1, one evaluation and an index", res)
	}
	n := getNode(t, s, "node-1")
	if !n.Drain || n.DrainStrategy == nil || n.SchedulingEligibility != structs.NodeSchedulingIneligible {
		t.Fatalf("node-1 after drain: drain %v strategy %+v eligibility %q", n.Drain, n.DrainStrategy, n.SchedulingEligibility)
	}
	if ds := n.DrainStrategy; ds.StartedAt.Before(start.Add(-time.Second)) || !ds.ForceDeadline.Equal(ds.StartedAt.Add(time.Hour)) {
		t.Errorf("drain strategy %+v: want StartedAt now and ForceDeadline an hour later", ds)
	}
	var old []*structs.Allocation
	for _, b := range before {
		a, _ := s.store.Alloc(b.ID)
		if a.DesiredStatus != structs.AllocDesiredStatusStop || a.DesiredDescription != scheduler.DescAllocMigrating ||
			a.ClientStatus != structs.AllocClientStatusRunning || a.NextAllocation == "" {
			t.Errorf("old alloc %s: desired %q (%q) client %q next %q, want stop (migrating), still running, replaced",
				a.ID, a.DesiredStatus, a.DesiredDescription, a.ClientStatus, a.NextAllocation)
		}
		old = append(old, a)
	}
	live, _ := s.store.AllocsByNode("node-2")
	if countDesiredRun(live) != 2 {
		t.Fatalf("node-2 has %d allocations to run, want the 2 replacements", countDesiredRun(live))
	}

	// Still draining while the old allocations run.
	time.Sleep(drainCheckInterval + 200*time.Millisecond)
	if n := getNode(t, s, "node-1"); !n.Drain {
		t.Fatal("drain completed while the migrated allocations were still running")
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, old...)
	n = waitNode(t, s, "node-1", "drain completion", func(n *structs.Node) bool { return !n.Drain })
	if n.DrainStrategy != nil || n.SchedulingEligibility != structs.NodeSchedulingIneligible {
		t.Errorf("completed drain: strategy %+v eligibility %q, want nil and ineligible", n.DrainStrategy, n.SchedulingEligibility)
	}
	all, _ := s.store.AllocsByJob("web")
	if countDesiredRun(all) != 2 {
		t.Errorf("job web has %d allocations to run, want 2", countDesiredRun(all))
	}
}

// TestDrainDeadlineStopsWhatCannotMove: with nowhere to go, allocations
// keep running on the draining node until its deadline, then are stopped;
// cancelling a drain with markEligible makes the node eligible again.
func TestDrainDeadlineStopsWhatCannotMove(t *testing.T) {
	ctx := context.Background()
	s, before := twoNodes(t)
	if _, err := s.UpdateNodeEligibility(ctx, "node-2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNodeDrain(ctx, "node-1", &structs.DrainSpec{Deadline: 1500 * time.Millisecond}, false); err != nil {
		t.Fatal(err)
	}
	all, _ := s.store.AllocsByJob("web")
	if countDesiredRun(all) != 2 || len(all) != 2 {
		t.Fatalf("before the deadline: %d allocations (%d to run), want the 2 originals running", len(all), countDesiredRun(all))
	}
	waitNode(t, s, "node-1", "deadline stop", func(*structs.Node) bool {
		a, _ := s.store.Alloc(before[0].ID)
		return a.DesiredStatus == structs.AllocDesiredStatusStop
	})
	for _, b := range before {
		if a, _ := s.store.Alloc(b.ID); a.DesiredDescription != scheduler.DescAllocMigrating {
			t.Errorf("alloc %s stopped at the deadline with %q", a.ID, a.DesiredDescription)
		}
	}
	res, err := s.UpdateNodeDrain(ctx, "node-1", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	n := getNode(t, s, "node-1")
	if n.Drain || n.DrainStrategy != nil || !n.Eligible() || len(res.EvalIDs) != 1 {
		t.Fatalf("cancelled drain: drain %v strategy %+v eligibility %q evals %v", n.Drain, n.DrainStrategy,
			n.SchedulingEligibility, res.EvalIDs)
	}
	// Eligible again: the job's evaluation placed it back on node-1.
	live, _ := s.store.AllocsByNode("node-1")
	if countDesiredRun(live) != 2 {
		t.Errorf("node-1 has %d allocations to run after the drain was cancelled, want 2", countDesiredRun(live))
	}
}

func TestDrainOfEmptyNodeCompletesAtOnce(t *testing.T) {
	s := startServer(t, openStore(t), Config{})
	res, err := s.UpdateNodeDrain(context.Background(), "node", &structs.DrainSpec{Deadline: -1}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.EvalIDs) != 0 || res.NodeID != "node-1" {
		t.Errorf("drain result %+v, want node-1 (by prefix) and no evaluations", res)
	}
	n := getNode(t, s, "node-1")
	if n.Drain || n.DrainStrategy != nil || n.Eligible() {
		t.Errorf("empty node after drain: drain %v strategy %+v eligibility %q, want done and ineligible",
			n.Drain, n.DrainStrategy, n.SchedulingEligibility)
	}
}

func TestNodeEligibility(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, openStore(t), Config{})
	res, err := s.UpdateNodeEligibility(ctx, "node-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalIDs == nil || len(res.EvalIDs) != 0 || res.NodeModifyIndex != getNode(t, s, "node-1").ModifyIndex {
		t.Errorf("ineligible result %+v, want no evaluations and the node's index", res)
	}
	// A job registered now cannot be placed; making the node eligible
	// places it.
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	if allocs, _ := s.store.AllocsByJob("web"); len(allocs) != 0 {
		t.Fatalf("job placed %d allocations on an ineligible node", len(allocs))
	}
	res, err = s.UpdateNodeEligibility(ctx, "node-1", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.EvalIDs) != 1 {
		t.Errorf("eligible result %+v, want the job's evaluation", res)
	}
	if allocs, _ := s.store.AllocsByJob("web"); len(allocs) != 1 {
		t.Fatalf("job has %d allocations once the node is eligible, want 1", len(allocs))
	}
	// A client registering again keeps the operator's choice.
	if _, err := s.UpdateNodeEligibility(ctx, "node-1", false); err != nil {
		t.Fatal(err)
	}
	registerNode(t, s, "node-1")
	if getNode(t, s, "node-1").Eligible() {
		t.Error("re-registration made the node eligible again")
	}
}

func TestNodeUpdateErrors(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, openStore(t), Config{})
	registerNode(t, s, "node-2")
	if _, err := s.UpdateNodeEligibility(ctx, "nope", false); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("eligibility of unknown node: %v, want not found naming it", err)
	}
	if _, err := s.UpdateNodeDrain(ctx, "nope", &structs.DrainSpec{}, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("drain of unknown node: %v, want not found", err)
	}
	if _, err := s.UpdateNodeDrain(ctx, "node-", &structs.DrainSpec{}, false); !errors.Is(err, ErrAmbiguousPrefix) {
		t.Errorf("drain of an ambiguous prefix: %v, want ErrAmbiguousPrefix", err)
	}
	registerNode(t, s, "node-3") // keeps node-2 from being drained at once
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNodeDrain(ctx, "node-2", &structs.DrainSpec{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNodeEligibility(ctx, "node-2", true); !errors.Is(err, ErrInvalid) {
		t.Errorf("eligible while draining: %v, want ErrInvalid", err)
	}
	s.leader.Store(false)
	defer s.leader.Store(true)
	if _, err := s.UpdateNodeDrain(ctx, "node-1", nil, true); !errors.Is(err, ErrNotLeader) {
		t.Errorf("drain on a follower: %v, want ErrNotLeader", err)
	}
	if _, err := s.UpdateNodeEligibility(ctx, "node-1", true); !errors.Is(err, ErrNotLeader) {
		t.Errorf("eligibility on a follower: %v, want ErrNotLeader", err)
	}
}

// TestDrainCompletesAfterRestart: a new server (or leader) re-arms the
// checks of drains in progress.
func TestDrainCompletesAfterRestart(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	allocs, _ := st.AllocsByNode("node-1")
	setClientStatus(t, s, structs.AllocClientStatusRunning, allocs...)
	if _, err := s.UpdateNodeDrain(ctx, "node-1", &structs.DrainSpec{}, false); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s2, err := New(Config{Store: st, Scheduler: s.sched, Admission: testAdmission})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Shutdown)
	if err := s2.armDrainChecks(); err != nil {
		t.Fatal(err)
	}
	setClientStatus(t, s2, structs.AllocClientStatusComplete, allocs...)
	waitNode(t, s2, "node-1", "drain completion after restart", func(n *structs.Node) bool { return !n.Drain })
}
