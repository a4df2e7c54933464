package server

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// openStore opens a bbolt store in a temporary dir.
func openStore(t *testing.T) *state.BoltStore {
	t.Helper()
	st, err := state.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// startServer makes a server over st with cfg's tuning and registers node-1.
func startServer(t *testing.T, st state.Store, cfg Config) *Server {
	t.Helper()
	if cfg.Scheduler == nil {
		sched, err := scheduler.New(scheduler.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Scheduler = sched
	}
	cfg.Store, cfg.Admission = st, testAdmission
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	n := &structs.Node{ID: "node-1", Name: "n1", Datacenter: "dc1",
		Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	return s
}

var errInjected = errors.New("injected alloc write failure")

// failAllocWrites fails every allocation write: UpsertAllocs outright, and
// ApplyPlan in the middle of its transaction (after the job and the first
// allocation were written) with an allocation that cannot be encoded.
type failAllocWrites struct{ *state.BoltStore }

func (f failAllocWrites) UpsertAllocs([]*structs.Allocation) (uint64, error) { return 0, errInjected }

func (f failAllocWrites) ApplyPlan(p *state.Plan) (uint64, error) {
	if len(p.Allocs) == 0 {
		return f.BoltStore.ApplyPlan(p)
	}
	poison := testJob("poison", "raw_exec", 1)
	poison.Version = 99
	poison.TaskGroups[0].Tasks[0].Config["x"] = math.NaN()
	cp := *p
	cp.Allocs = append([]*structs.Allocation{p.Allocs[0], {ID: "poison", JobID: "x", NodeID: "node-1", Job: poison}}, p.Allocs[1:]...)
	return f.BoltStore.ApplyPlan(&cp)
}

func TestFailedAllocWriteStoresNothingOfTheJob(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, failAllocWrites{st}, Config{})
	before := st.Index()
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 2)); err == nil {
		t.Fatal("registration succeeded although its allocations could not be written")
	}
	if _, err := st.Job("web"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("job stored without its plan: %v", err)
	}
	if _, err := st.JobVersions("web"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("job version stored without its plan: %v", err)
	}
	allocs, _ := st.Allocs()
	evals, _ := st.Evals()
	if len(allocs) != 0 || len(evals) != 0 || st.Index() != before {
		t.Fatalf("half a plan stored: %d allocs, %d evals, index %d → %d", len(allocs), len(evals), before, st.Index())
	}
}

// TestUnplannedJobIsPlannedAtStart: a job whose latest version no
// evaluation planned (a crash between writes of older versions) is
// evaluated when the server starts.
func TestUnplannedJobIsPlannedAtStart(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, testJob("stopme", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	if _, err := st.UpsertJob(withDefaults(testJob("web", "raw_exec", 2))); err != nil {
		t.Fatal(err)
	}
	stopped, _ := st.Job("stopme")
	stopped.Stop, stopped.Version = true, stopped.Version+1
	if _, err := st.UpsertJob(stopped); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, st, Config{})
	if s2.ClusterID() == "" || s2.ClusterID() != s.ClusterID() {
		t.Fatalf("cluster ID %q after restart, was %q", s2.ClusterID(), s.ClusterID())
	}
	allocs, err := s2.JobAllocs(ctx, "web")
	if err != nil || len(allocs) != 2 {
		t.Fatalf("unplanned job not placed at start: %d allocs, %v", len(allocs), err)
	}
	if evals, _ := s2.JobEvals(ctx, "web"); len(evals) != 1 || evals[0].TriggeredBy != TriggerJobRegister {
		t.Fatalf("evals = %+v", evals)
	}
	left, _ := s2.JobAllocs(ctx, "stopme")
	if len(left) != 1 || left[0].DesiredStatus != structs.AllocDesiredStatusStop {
		t.Fatalf("stopped job's allocations not stopped at start: %+v", left)
	}
	// A second start has nothing left to do.
	idx := st.Index()
	s2.Shutdown()
	startServer(t, st, Config{})
	if st.Index() != idx {
		t.Fatalf("restart of a planned state wrote (index %d → %d)", idx, st.Index())
	}
}

func withDefaults(j *structs.Job) *structs.Job {
	testAdmission.Canonicalize(j)
	return j
}

// TestPurgedAllocCollectionTakesThePlanLock: the deletion of a purged
// job's terminal allocations waits for the plan in progress.
func TestPurgedAllocCollectionTakesThePlanLock(t *testing.T) {
	ctx := context.Background()
	s, st := newServer(t)
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	allocs, _ := s.JobAllocs(ctx, "web")
	setClientStatus(t, s, structs.AllocClientStatusRunning, allocs...)
	if _, err := s.StopJob(ctx, "web", true); err != nil {
		t.Fatal(err)
	}
	s.planMu.Lock()
	done := make(chan error, 1)
	go func() {
		done <- s.UpdateAllocs(ctx, []*structs.Allocation{{ID: allocs[0].ID, ClientStatus: structs.AllocClientStatusComplete}})
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := st.Alloc(allocs[0].ID); err != nil {
			s.planMu.Unlock()
			t.Fatalf("allocation deleted while a plan held the lock: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.planMu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(allocs[0].ID); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("terminal allocation of purged job kept: %v", err)
	}
}

// gatedScheduler blocks the first Process call until released.
type gatedScheduler struct {
	scheduler.Scheduler
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedScheduler) Process(job *structs.Job, allocs []*structs.Allocation, nodes []*structs.Node, opts scheduler.Options) (*scheduler.Plan, error) {
	if job.ID == "big" {
		g.once.Do(func() {
			close(g.entered)
			<-g.release
		})
	}
	return g.Scheduler.Process(job, allocs, nodes, opts)
}

// TestPlanIsComputedWithoutThePlanLock: while one job's plan is being
// computed, other registrations commit; the slow plan is then recomputed
// against the new state (no port handed out twice).
func TestPlanIsComputedWithoutThePlanLock(t *testing.T) {
	ctx := context.Background()
	inner, err := scheduler.New(scheduler.Config{MinDynamicPort: 20000, MaxDynamicPort: 20001}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedScheduler{Scheduler: inner, entered: make(chan struct{}), release: make(chan struct{})}
	st := openStore(t)
	s := startServer(t, st, Config{Scheduler: g})
	withPort := func(id string) *structs.Job {
		j := testJob(id, "raw_exec", 1)
		j.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "host", DynamicPorts: []structs.Port{{Label: "http"}}}}
		return j
	}
	bigDone := make(chan error, 1)
	go func() { _, err := s.RegisterJob(ctx, withPort("big")); bigDone <- err }()
	<-g.entered
	other := make(chan error, 1)
	go func() { _, err := s.RegisterJob(ctx, withPort("small")); other <- err }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("a registration waited for another job's plan computation")
	}
	close(g.release)
	if err := <-bigDone; err != nil {
		t.Fatal(err)
	}
	allocs, _ := st.Allocs()
	ports := map[int]string{}
	for _, a := range allocs {
		for _, p := range a.AllocatedResources.Shared.Ports {
			if ports[p.Value] != "" {
				t.Fatalf("port %d handed to %s and %s", p.Value, ports[p.Value], a.JobID)
			}
			ports[p.Value] = a.JobID
		}
	}
	if len(ports) != 2 {
		t.Fatalf("ports = %v", ports)
	}
}

func TestBoundsAreCheckedBeforeThePlanLock(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{MaxJobCount: 100, MaxJobSize: 64 << 10, MaxPlanSize: 1 << 20})
	big := testJob("big", "raw_exec", 60)
	big.TaskGroups = append(big.TaskGroups, &structs.TaskGroup{Name: "h", Count: 41, Tasks: big.TaskGroups[0].Tasks})
	huge := testJob("huge", "raw_exec", 20_000_000)
	fat := testJob("fat", "raw_exec", 1)
	fat.Meta = map[string]string{"blob": strings.Repeat("x", 100<<10)}
	wide := testJob("wide", "raw_exec", 40)
	wide.Meta = map[string]string{"blob": strings.Repeat("x", 30<<10)}
	tests := []struct {
		job  *structs.Job
		want string
	}{
		{big, `job "big" asks for more than 100 allocations (group "h" count 41)`},
		{huge, `job "huge" asks for more than 100 allocations (group "g" count 20000000)`},
		{fat, `job "fat" is 102`},
		{wide, `job "wide" would store 40 allocations of 309`},
	}
	before := st.Index()
	s.planMu.Lock() // a plan in progress: rejections must not wait for it
	defer s.planMu.Unlock()
	for _, tc := range tests {
		_, err := s.RegisterJob(ctx, tc.job)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalid containing %q", tc.job.ID, err, tc.want)
		}
	}
	if st.Index() != before {
		t.Fatal("a rejected job wrote something")
	}
}

// TestStartSurvivesAnUnwritablePlan: when the start-up pass cannot write
// (a full disk), the server still starts and the job is left as it was.
func TestStartSurvivesAnUnwritablePlan(t *testing.T) {
	st := openStore(t)
	if _, err := st.UpsertNode(&structs.Node{ID: "node-1", Name: "n1",
		Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertJob(withDefaults(testJob("web", "raw_exec", 1))); err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: failAllocWrites{st}, Scheduler: sched, Admission: testAdmission})
	if err != nil {
		t.Fatalf("server refused to start because a plan could not be written: %v", err)
	}
	defer s.Shutdown()
	if allocs, _ := st.Allocs(); len(allocs) != 0 {
		t.Fatalf("allocs = %d", len(allocs))
	}
	// Writable again: the next start plans it.
	s2 := startServer(t, st, Config{})
	if allocs, _ := s2.JobAllocs(context.Background(), "web"); len(allocs) != 1 {
		t.Fatalf("job not planned at the next start: %d allocs", len(allocs))
	}
}

// TestNodeRegistrationSurvivesAnUnwritablePlan: a node whose re-evaluation
// of the jobs cannot be written (a full disk) is still registered, so the
// client starts and keeps what it runs.
func TestNodeRegistrationSurvivesAnUnwritablePlan(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	sched, err := scheduler.New(scheduler.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: failAllocWrites{st}, Scheduler: sched, Admission: testAdmission})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	// No node yet: the plan places nothing and is written.
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	n := &structs.Node{ID: "node-1", Name: "n1", Datacenter: "dc1",
		Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(ctx, n); err != nil {
		t.Fatalf("node registration failed because a job's plan could not be written: %v", err)
	}
	if _, err := st.Node("node-1"); err != nil {
		t.Fatalf("node not stored: %v", err)
	}
	if allocs, _ := st.Allocs(); len(allocs) != 0 {
		t.Fatalf("half a plan stored: %d allocs", len(allocs))
	}
}
