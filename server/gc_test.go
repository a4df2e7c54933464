package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// fakeClock is a settable Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestJobVersionsAreCollected(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	for i := 0; i < 10; i++ {
		j := testJob("web", "raw_exec", 1)
		j.Meta = map[string]string{"v": fmt.Sprint(i)}
		if _, err := s.RegisterJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := s.JobVersions(ctx, "web")
	if err != nil || len(vs) != state.DefaultJobVersions || vs[0].Version != 9 {
		t.Fatalf("kept %d versions (newest %d), want %d: %v", len(vs), vs[0].Version, state.DefaultJobVersions, err)
	}
}

func ids[T any](items []T, id func(T) string) []string {
	var out []string
	for _, it := range items {
		out = append(out, id(it))
	}
	slices.Sort(out)
	return out
}

func allocIDs(t *testing.T, st state.Store) []string {
	t.Helper()
	all, err := st.Allocs()
	if err != nil {
		t.Fatal(err)
	}
	return ids(all, func(a *structs.Allocation) string { return a.ID })
}

func evalIDs(t *testing.T, st state.Store) []string {
	t.Helper()
	all, err := st.Evals()
	if err != nil {
		t.Fatal(err)
	}
	return ids(all, func(e *state.Evaluation) string { return e.ID })
}

func TestGCRemovesOldEvalsAndReplacedAllocs(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	st := openStore(t)
	s := startServer(t, st, Config{Now: clock.Now, GCInterval: 10 * time.Hour})
	r0, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1))
	if err != nil {
		t.Fatal(err)
	}
	a0, _ := s.JobAllocs(ctx, "web")
	setClientStatus(t, s, structs.AllocClientStatusRunning, a0...)
	changed := testJob("web", "raw_exec", 1)
	changed.Meta = map[string]string{"v": "1"}
	r1, err := s.RegisterJob(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, a0...)
	// A batch job whose failed allocation may not be rescheduled: it stays.
	b := testJob("batch", "raw_exec", 1)
	b.Type = structs.JobTypeBatch
	b.TaskGroups[0].ReschedulePolicy = &structs.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	if _, err := s.RegisterJob(ctx, b); err != nil {
		t.Fatal(err)
	}
	ba, _ := s.JobAllocs(ctx, "batch")
	setClientStatus(t, s, structs.AllocClientStatusFailed, ba...)

	allocsBefore, evalsBefore := allocIDs(t, st), evalIDs(t, st)
	clock.Advance(30 * time.Minute)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if got := allocIDs(t, st); !slices.Equal(got, allocsBefore) {
		t.Fatalf("GC before the threshold removed allocations: %v → %v", allocsBefore, got)
	}
	if got := evalIDs(t, st); !slices.Equal(got, evalsBefore) {
		t.Fatalf("GC before the threshold removed evaluations: %v → %v", evalsBefore, got)
	}

	clock.Advance(time.Hour)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(a0[0].ID); err == nil {
		t.Fatal("replaced terminal allocation kept past the threshold")
	}
	if _, err := st.Alloc(ba[0].ID); err != nil {
		t.Fatalf("failed allocation still meant to run was removed: %v", err)
	}
	if cur, _ := s.JobAllocs(ctx, "web"); len(cur) != 1 || cur[0].DesiredStatus != structs.AllocDesiredStatusRun {
		t.Fatalf("current allocation: %+v", cur)
	}
	if _, err := st.Eval(r0.EvalID); err == nil {
		t.Fatal("old evaluation kept past the threshold")
	}
	if _, err := st.Eval(r1.EvalID); err != nil {
		t.Fatalf("the job's latest evaluation was removed: %v", err)
	}
	if evals, _ := s.JobEvals(ctx, "batch"); len(evals) != 1 {
		t.Fatalf("batch job's latest evaluation: %d", len(evals))
	}
}

// TestGCRunsFromClientUpdates: no operator action needed; a client update
// after GCInterval collects.
func TestGCRunsFromClientUpdates(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	st := openStore(t)
	s := startServer(t, st, Config{Now: clock.Now, GCInterval: time.Minute, AllocGCThreshold: time.Minute,
		EvalGCThreshold: time.Minute})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	a0, _ := s.JobAllocs(ctx, "web")
	changed := testJob("web", "raw_exec", 1)
	changed.Meta = map[string]string{"v": "1"}
	if _, err := s.RegisterJob(ctx, changed); err != nil {
		t.Fatal(err)
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, a0...)
	if _, err := st.Alloc(a0[0].ID); err != nil {
		t.Fatal("collected before the threshold")
	}
	clock.Advance(2 * time.Minute)
	cur, _ := s.JobAllocs(ctx, "web")
	var live *structs.Allocation
	for _, a := range cur {
		if a.DesiredStatus == structs.AllocDesiredStatusRun {
			live = a
		}
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, live)
	if _, err := st.Alloc(a0[0].ID); err == nil {
		t.Fatal("replaced allocation not collected by the periodic pass")
	}
	if evals, _ := st.Evals(); len(evals) != 1 {
		t.Fatalf("evaluations left: %d, want the latest only", len(evals))
	}
}

func ptr[T any](v T) *T { return &v }

// signalAllocs reports each Allocs call on called.
type signalAllocs struct {
	*state.BoltStore
	called chan struct{}
}

func (s signalAllocs) Allocs() ([]*structs.Allocation, error) {
	select {
	case s.called <- struct{}{}:
	default:
	}
	return s.BoltStore.Allocs()
}

// TestGCReadsWithoutThePlanLock: a collection decodes every allocation
// while a plan holds the lock (a big state must not stall registrations),
// and commits its deletions only once the lock is free.
func TestGCReadsWithoutThePlanLock(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	st := openStore(t)
	wrapped := signalAllocs{BoltStore: st, called: make(chan struct{}, 1)}
	s := startServer(t, wrapped, Config{Now: clock.Now, GCInterval: 10 * time.Hour})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	a0, _ := s.JobAllocs(ctx, "web")
	if _, err := s.StopJob(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, a0...)
	clock.Advance(2 * time.Hour)
	select {
	case <-wrapped.called: // drain the calls of the setup
	default:
	}

	s.planMu.Lock()
	done := make(chan error, 1)
	go func() { done <- s.GC() }()
	select {
	case <-wrapped.called:
	case <-time.After(10 * time.Second):
		s.planMu.Unlock()
		t.Fatal("the collection waited for the plan lock before reading the state")
	}
	if _, err := st.Alloc(a0[0].ID); err != nil {
		s.planMu.Unlock()
		t.Fatalf("allocation removed while a plan held the lock: %v", err)
	}
	s.planMu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(a0[0].ID); err == nil {
		t.Fatal("stopped terminal allocation kept past the threshold")
	}
}

// Garbage that outgrew one etcd transaction (each plan fitted, their
// leftovers together do not) is still collected, in batches; a purge of a
// job with more terminal allocations than one batch removes them all; and
// the purge's evaluation stays readable (Nomad's CLI monitors it).
func TestGCAndPurgeFitEtcdTransactionLimits(t *testing.T) {
	ctx := context.Background()
	st := openEtcdStoreOps(t, 200)
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := startServer(t, st, Config{Now: clock.Now, GCInterval: 100 * time.Hour})
	for i := range 12 {
		id := fmt.Sprintf("job-%d", i)
		if _, err := s.RegisterJob(ctx, testJob(id, "raw_exec", 5)); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		if _, err := s.StopJob(ctx, id, false); err != nil {
			t.Fatalf("stop %s: %v", id, err)
		}
		a, _ := s.JobAllocs(ctx, id)
		setClientStatus(t, s, structs.AllocClientStatusComplete, a...)
	}
	clock.Advance(2 * time.Hour)
	if err := s.GC(); err != nil {
		t.Fatalf("GC of 60 allocations over a 200-operation limit: %v", err)
	}
	if all, _ := st.Allocs(); len(all) != 0 {
		t.Fatalf("%d allocations left after GC", len(all))
	}

	s.gcBatch.Store(4)
	if _, err := s.RegisterJob(ctx, testJob("big", "raw_exec", 10)); err != nil {
		t.Fatal(err)
	}
	a, _ := s.JobAllocs(ctx, "big")
	setClientStatus(t, s, structs.AllocClientStatusFailed, a...)
	evalID, err := s.StopJob(ctx, "big", true)
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := st.Allocs(); len(all) != 0 {
		t.Fatalf("%d allocations of the purged job left (batch of 4)", len(all))
	}
	if e, err := s.Eval(ctx, evalID); err != nil || e.JobID != "big" {
		t.Fatalf("the purge's evaluation %s = %+v, %v; want it readable", evalID, e, err)
	}
	clock.Advance(2 * time.Hour)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, evalID); err == nil {
		t.Fatal("the purged job's evaluation outlived garbage collection")
	}
}

// A node down for node_gc_threshold with nothing left to run is removed,
// as Nomad's node GC does; one down for less is kept, and a removed node
// that comes back is told to register again.
func TestGCRemovesLongDownNodes(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	st := openStore(t)
	s := startServer(t, st, Config{Now: clock.Now, GCInterval: 100 * time.Hour})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	a, _ := s.JobAllocs(ctx, "web")
	setClientStatus(t, s, structs.AllocClientStatusRunning, a...)
	expireHeartbeat(s, "node-1")
	n, err := st.Node("node-1")
	if err != nil || n.Status != structs.NodeStatusDown || n.StatusUpdatedAt != clock.Now().Unix() {
		t.Fatalf("node-1 after its deadline: %+v, %v; want down since now", n, err)
	}
	clock.Advance(23 * time.Hour)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Node("node-1"); err != nil {
		t.Fatalf("node down for 23h removed: %v", err)
	}
	clock.Advance(2 * time.Hour)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Node("node-1"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("node down for 25h with only a lost allocation: %v, want removed", err)
	}
	if _, err := s.Heartbeat(ctx, "node-1"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("heartbeat of the removed node: %v, want ErrUnknownNode", err)
	}
}

// A purged job's evaluations stay until they are as old as
// eval_gc_threshold, as Nomad's: a collection right after the purge keeps
// the purge's own (the CLI monitors it).
func TestGCKeepsARecentPurgeEvaluation(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := startServer(t, openStore(t), Config{Now: clock.Now, GCInterval: 100 * time.Hour})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	evalID, err := s.StopJob(ctx, "web", true)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, evalID); err != nil {
		t.Fatalf("the purge's evaluation gone 1s after the purge: %v", err)
	}
}
