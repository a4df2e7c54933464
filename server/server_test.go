package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

var errBadJob = errors.New("invalid job")

// testAdmission stands in for jobspecs: it defaults the type and rejects a
// job without groups or with a negative count.
var testAdmission = AdmissionFuncs{
	CanonicalizeFunc: func(j *structs.Job) {
		if j.Type == "" {
			j.Type = structs.JobTypeService
		}
		if j.ID == "" {
			j.ID = j.Name
		}
	},
	ValidateFunc: func(j *structs.Job) ([]string, error) {
		if len(j.TaskGroups) == 0 {
			return nil, fmt.Errorf("%w: job %q has no task groups", errBadJob, j.ID)
		}
		for _, tg := range j.TaskGroups {
			if tg.Count < 0 {
				return nil, fmt.Errorf("%w: group %q: count must be >= 0", errBadJob, tg.Name)
			}
		}
		return []string{"a warning"}, nil
	},
}

type mutatorFunc func(*structs.Job) ([]string, error)

func (mutatorFunc) Name() string                              { return "test" }
func (m mutatorFunc) Mutate(j *structs.Job) ([]string, error) { return m(j) }

// newServer makes a server over a fresh store with node-1 registered.
func newServer(t *testing.T, mutators ...JobMutator) (*Server, state.Store) {
	t.Helper()
	st := openStore(t)
	return startServer(t, st, Config{Mutators: mutators}), st
}

func testJob(id, driver string, count int) *structs.Job {
	return &structs.Job{ID: id, Name: id, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: count,
		Tasks: []*structs.Task{{Name: "t", Driver: driver, Config: map[string]any{"command": "/bin/sleep", "args": []any{"60", 1}}}}}}}
}

func setClientStatus(t *testing.T, s *Server, status string, allocs ...*structs.Allocation) {
	t.Helper()
	var ups []*structs.Allocation
	for _, a := range allocs {
		ups = append(ups, &structs.Allocation{ID: a.ID, ClientStatus: status})
	}
	if err := s.UpdateAllocs(context.Background(), ups); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterInvalidStoresNothing(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		job  *structs.Job
		want string
	}{
		{"nil job", nil, "missing job"},
		{"no groups", &structs.Job{ID: "x"}, `job "x" has no task groups`},
		{"negative count", testJob("x", "raw_exec", -1), `group "g": count must be >= 0`},
		{"no id", &structs.Job{TaskGroups: []*structs.TaskGroup{{Name: "g"}}}, "job ID is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, st := newServer(t)
			before := st.Index()
			_, err := s.RegisterJob(ctx, tc.job)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") && tc.name != "multi" {
				t.Errorf("error is not one line: %q", err)
			}
			if st.Index() != before {
				t.Fatalf("index moved from %d to %d: something was stored", before, st.Index())
			}
		})
	}
	t.Run("mutator rejection", func(t *testing.T) {
		s, st := newServer(t, mutatorFunc(func(*structs.Job) ([]string, error) { return nil, errors.New("no sidecar for you") }))
		before := st.Index()
		if _, err := s.RegisterJob(ctx, testJob("a", "raw_exec", 1)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no sidecar for you") {
			t.Fatalf("err = %v", err)
		}
		if st.Index() != before {
			t.Fatal("mutator rejection stored something")
		}
	})
}

func TestRegisterVersionsAndReplacement(t *testing.T) {
	ctx := context.Background()
	var mutated int
	s, _ := newServer(t, mutatorFunc(func(j *structs.Job) ([]string, error) {
		mutated++
		if j.Meta == nil {
			j.Meta = map[string]string{}
		}
		j.Meta["injected"] = "yes"
		return []string{"mutated"}, nil
	}))
	in := testJob("web", "raw_exec", 2)
	res, err := s.RegisterJob(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if in.Meta != nil || in.Type != "" {
		t.Fatal("RegisterJob modified the caller's job")
	}
	if res.EvalID == "" || strings.Join(res.Warnings, ",") != "a warning,mutated" || mutated != 1 {
		t.Fatalf("result = %+v (mutated %d)", res, mutated)
	}
	j, err := s.Job(ctx, "web")
	if err != nil || j.Version != 0 || j.Meta["injected"] != "yes" || j.Status != structs.JobStatusPending {
		t.Fatalf("job = %+v, %v", j, err)
	}
	allocs, _ := s.JobAllocs(ctx, "web")
	if len(allocs) != 2 || allocs[0].Name != "web.g[0]" || allocs[1].Name != "web.g[1]" || allocs[0].EvalID != res.EvalID {
		t.Fatalf("allocs = %+v", allocs)
	}

	// Identical re-registration: same version, nothing replaced.
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 2)); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job(ctx, "web"); j.Version != 0 {
		t.Fatalf("identical register bumped version to %d", j.Version)
	}
	if again, _ := s.JobAllocs(ctx, "web"); len(again) != 2 {
		t.Fatalf("identical register changed allocations: %d", len(again))
	}

	// Changed spec: new version, allocations replaced.
	changed := testJob("web", "raw_exec", 2)
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"X": "1"}
	if _, err := s.RegisterJob(ctx, changed); err != nil {
		t.Fatal(err)
	}
	vs, _ := s.JobVersions(ctx, "web")
	if len(vs) != 2 || vs[0].Version != 1 {
		t.Fatalf("versions = %d", len(vs))
	}
	after, _ := s.JobAllocs(ctx, "web")
	var stopped, placed int
	for _, a := range after {
		switch a.DesiredStatus {
		case structs.AllocDesiredStatusStop:
			stopped++
		case structs.AllocDesiredStatusRun:
			placed++
			if a.PreviousAllocation == "" || a.Job.Version != 1 {
				t.Errorf("replacement %s: prev %q version %d", a.Name, a.PreviousAllocation, a.Job.Version)
			}
		}
	}
	if stopped != 2 || placed != 2 {
		t.Fatalf("stopped %d placed %d", stopped, placed)
	}
}

func TestStopAndPurge(t *testing.T) {
	ctx := context.Background()
	s, st := newServer(t)
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	allocs, _ := s.JobAllocs(ctx, "web")
	setClientStatus(t, s, structs.AllocClientStatusRunning, allocs...)
	if j, _ := s.Job(ctx, "web"); j.Status != structs.JobStatusRunning {
		t.Fatalf("status = %s", j.Status)
	}
	evalID, err := s.StopJob(ctx, "web", false)
	if err != nil || evalID == "" {
		t.Fatal(err)
	}
	allocs, _ = s.JobAllocs(ctx, "web")
	if allocs[0].DesiredStatus != structs.AllocDesiredStatusStop || allocs[0].DesiredDescription == "" {
		t.Fatalf("alloc not stopped: %+v", allocs[0])
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, allocs...)
	if j, _ := s.Job(ctx, "web"); j.Status != structs.JobStatusDead || !j.Stop {
		t.Fatalf("after stop: status %s stop %v", j.Status, j.Stop)
	}
	// Purge: the job goes at once, its terminal allocations too; the
	// purge's evaluation stays.
	evalID, err = s.StopJob(ctx, "web", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, evalID); err != nil {
		t.Fatalf("the purge's evaluation: %v", err)
	}
	if _, err := s.Job(ctx, "web"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("purged job still there: %v", err)
	}
	if all, _ := st.Allocs(); len(all) != 0 {
		t.Fatalf("%d allocations left after purge", len(all))
	}
	if _, err := s.StopJob(ctx, "web", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stop unknown job: %v", err)
	}
}

func TestPurgeRunningJobRemovesAllocsOnceTerminal(t *testing.T) {
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
	left, _ := st.Allocs()
	if len(left) != 1 || left[0].DesiredStatus != structs.AllocDesiredStatusStop {
		t.Fatalf("running alloc of purged job must stay until terminal: %+v", left)
	}
	if got, err := s.JobAllocs(ctx, "web"); err != nil || len(got) != 1 {
		t.Fatalf("JobAllocs of purged job with a live alloc = %d, %v", len(got), err)
	}
	setClientStatus(t, s, structs.AllocClientStatusComplete, left...)
	if left, _ = st.Allocs(); len(left) != 0 {
		t.Fatalf("terminal alloc of purged job not removed")
	}
	if _, err := s.JobAllocs(ctx, "web"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("JobAllocs of gone job: %v", err)
	}
}

func TestJobAllocsOfJobWithNone(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	if _, err := s.RegisterJob(ctx, testJob("zero", "raw_exec", 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.JobAllocs(ctx, "zero"); err != nil || len(got) != 0 {
		t.Fatalf("JobAllocs of a count-0 job = %d, %v", len(got), err)
	}
}

func TestPlacementFailureRecordedAndRetriedOnNodeChange(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	res, err := s.RegisterJob(ctx, testJob("d", "docker", 1))
	if err != nil {
		t.Fatal(err)
	}
	eval, err := s.Eval(ctx, res.EvalID)
	if err != nil {
		t.Fatal(err)
	}
	m := eval.FailedTGAllocs["g"]
	if m == nil || m.ConstraintFiltered["driver docker not available on node n1"] != 1 ||
		!strings.Contains(eval.StatusDescription, "driver docker not available on node n1") {
		t.Fatalf("eval = %+v", eval)
	}
	evals, _ := s.JobEvals(ctx, "d")
	if len(evals) != 1 {
		t.Fatalf("evals = %d", len(evals))
	}
	if j, _ := s.Job(ctx, "d"); j.Status != structs.JobStatusPending {
		t.Fatalf("status = %s", j.Status)
	}
	// The node gains docker: the blocked placement is retried.
	n := &structs.Node{ID: "node-1", Name: "n1", Datacenter: "dc1", Drivers: map[string]*structs.DriverInfo{
		"raw_exec": {Detected: true, Healthy: true}, "docker": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if allocs, _ := s.JobAllocs(ctx, "d"); len(allocs) != 1 {
		t.Fatalf("placement not retried: %d allocs", len(allocs))
	}
	// Unchanged node registration writes nothing.
	idx := s.Index()
	n.Drivers["docker"].UpdateTime = time.Now()
	if err := s.RegisterNode(ctx, n); err != nil || s.Index() != idx {
		t.Fatalf("unchanged node re-registration wrote (err %v)", err)
	}
}

func TestNodeAllocsBlocksAndPrefixLookup(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	idx := s.Index()
	got := make(chan int, 1)
	go func() {
		// Like the client: keep waiting past the index each answer reflects.
		for i := 0; i < 10; i++ {
			allocs, next, _ := s.NodeAllocs(ctx, "node-1", idx)
			if len(allocs) > 0 {
				got <- len(allocs)
				return
			}
			idx = next
		}
		got <- 0
	}()
	if _, err := s.RegisterJob(ctx, testJob("a", "raw_exec", 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("NodeAllocs returned %d allocations", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NodeAllocs did not unblock")
	}
	allocs, _ := s.Allocs(ctx)
	a, err := s.Alloc(ctx, allocs[0].ID[:6])
	if err != nil || a.ID != allocs[0].ID {
		t.Fatalf("prefix lookup: %v", err)
	}
	if _, err := s.Alloc(ctx, "zzzz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown prefix: %v", err)
	}
	if _, err := s.Alloc(ctx, ""); err == nil {
		// "" is a prefix of everything: with one alloc it resolves; register another to make it ambiguous.
		if _, err := s.RegisterJob(ctx, testJob("b", "raw_exec", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Alloc(ctx, ""); !errors.Is(err, ErrAmbiguousPrefix) {
			t.Fatalf("ambiguous prefix: %v", err)
		}
	}
	if n, err := s.Node(ctx, "node"); err != nil || n.Status != structs.NodeStatusReady {
		t.Fatalf("node prefix: %v %+v", err, n)
	}
}

func TestJobStatus(t *testing.T) {
	a := func(client, desired string) *structs.Allocation {
		return &structs.Allocation{ClientStatus: client, DesiredStatus: desired}
	}
	tests := []struct {
		name   string
		job    *structs.Job
		allocs []*structs.Allocation
		want   string
	}{
		{"no allocs", &structs.Job{}, nil, structs.JobStatusPending},
		{"pending", &structs.Job{}, []*structs.Allocation{a("pending", "run")}, structs.JobStatusPending},
		{"running", &structs.Job{}, []*structs.Allocation{a("running", "run"), a("pending", "run")}, structs.JobStatusRunning},
		{"stopped", &structs.Job{Stop: true}, []*structs.Allocation{a("complete", "stop")}, structs.JobStatusDead},
		{"stopping", &structs.Job{Stop: true}, []*structs.Allocation{a("running", "stop")}, structs.JobStatusRunning},
		{"batch done", &structs.Job{Type: "batch"}, []*structs.Allocation{a("complete", "run")}, structs.JobStatusDead},
		{"all failed", &structs.Job{}, []*structs.Allocation{a("failed", "run")}, structs.JobStatusDead},
		{"failed, rescheduling", &structs.Job{}, []*structs.Allocation{{ClientStatus: "failed", DesiredStatus: "run",
			FollowupEvalID: "e"}}, structs.JobStatusPending},
	}
	for _, tc := range tests {
		if got := JobStatus(tc.job, tc.allocs); got != tc.want {
			t.Errorf("%s: got %s want %s", tc.name, got, tc.want)
		}
	}
}
