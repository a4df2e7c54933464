package state

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/structs"
)

// poisonAlloc cannot be encoded (NaN in its job's config): writing it fails
// in the middle of a transaction, after the writes before it.
func poisonAlloc() *structs.Allocation {
	j := testJob("other", 7)
	j.TaskGroups[0].Tasks[0].Config["x"] = math.NaN()
	return &structs.Allocation{ID: "poison", JobID: "a", NodeID: "n1", Job: j}
}

func TestApplyPlanIsAllOrNothing(t *testing.T) { eachStore(t, testApplyPlanIsAllOrNothing) }

func testApplyPlanIsAllOrNothing(t *testing.T, s Store) {
	before := s.Index()
	_, err := s.ApplyPlan(&Plan{
		Job:    testJob("a", 0),
		Allocs: []*structs.Allocation{{ID: "a1", JobID: "a", NodeID: "n1", Job: testJob("a", 0)}, poisonAlloc()},
		Evals:  []*Evaluation{{ID: "e1", JobID: "a", Status: EvalStatusComplete}},
	})
	if err == nil {
		t.Fatal("plan with an unencodable allocation was applied")
	}
	if _, err := s.Job("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job stored by a failed plan: %v", err)
	}
	if _, err := s.JobVersions("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job version stored by a failed plan: %v", err)
	}
	for name, n := range map[string]func() (int, error){
		"allocs":  func() (int, error) { a, err := s.Allocs(); return len(a), err },
		"by node": func() (int, error) { a, err := s.AllocsByNode("n1"); return len(a), err },
		"evals":   func() (int, error) { e, err := s.Evals(); return len(e), err },
	} {
		if got, err := n(); err != nil || got != 0 {
			t.Errorf("%s after failed plan: %d (%v)", name, got, err)
		}
	}
	if s.Index() != before {
		t.Fatalf("index moved from %d to %d", before, s.Index())
	}

	// The same plan without the poison commits everything with the job's indexes.
	idx, err := s.ApplyPlan(&Plan{
		Job:    testJob("a", 0),
		Allocs: []*structs.Allocation{{ID: "a1", JobID: "a", NodeID: "n1", Job: testJob("a", 0)}},
		Evals:  []*Evaluation{{ID: "e1", JobID: "a", Status: EvalStatusComplete}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Alloc("a1")
	if err != nil || a.Job.JobModifyIndex != idx || a.AllocModifyIndex != idx {
		t.Fatalf("alloc = %+v, %v (want job modify index %d)", a, err, idx)
	}
	if e, err := s.Eval("e1"); err != nil || e.JobModifyIndex != idx {
		t.Fatalf("eval = %+v, %v", e, err)
	}
}

func TestApplyPlanKeepsClientFields(t *testing.T) { eachStore(t, testApplyPlanKeepsClientFields) }

func testApplyPlanKeepsClientFields(t *testing.T, s Store) {
	if _, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a1", JobID: "a", NodeID: "n1",
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateAllocsFromClient([]*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}); err != nil {
		t.Fatal(err)
	}
	// A plan computed before the client's update carries the stale status.
	stale := &structs.Allocation{ID: "a1", JobID: "a", NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusStop,
		ClientStatus: structs.AllocClientStatusPending}
	if _, err := s.ApplyPlan(&Plan{Allocs: []*structs.Allocation{stale}}); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Alloc("a1")
	if a.ClientStatus != structs.AllocClientStatusRunning || a.DesiredStatus != structs.AllocDesiredStatusStop {
		t.Fatalf("plan overwrote the client's status: %+v", a)
	}
}

func TestJobVersionsAreBounded(t *testing.T) {
	for _, keep := range []int{0, 3} {
		t.Run(fmt.Sprint("keep ", keep), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, st *storage) { testJobVersionsAreBounded(t, st.openVersions(t, keep), keep) })
		})
	}
}

func testJobVersionsAreBounded(t *testing.T, s Store, keep int) {
	var err error
	for v := uint64(0); v < 10; v++ {
		if v%2 == 0 {
			_, err = s.UpsertJob(testJob("a", v))
		} else {
			_, err = s.ApplyPlan(&Plan{Job: testJob("a", v)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := keep
	if want == 0 {
		want = DefaultJobVersions
	}
	vs, err := s.JobVersions("a")
	if err != nil || len(vs) != want || vs[0].Version != 9 || vs[len(vs)-1].Version != uint64(10-want) {
		t.Fatalf("kept %d versions (%v), want the %d newest", len(vs), err, want)
	}
}

// TestNodeIndexConsistency runs random writes through every write path and
// checks after each that the node and job indexes return exactly the
// allocations a full scan finds.
func TestNodeIndexConsistency(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store) {
		n := 300
		if _, ok := s.(*EtcdStore); ok {
			n = 150 // each call is a few round trips to the member
		}
		randomAllocWrites(t, s, n, func() { checkNodeIndex(t, s) })
	})
}

// randomAllocWrites makes n random allocation writes (of three jobs with
// two versions each, on three nodes), calling check after each.
func randomAllocWrites(t *testing.T, s Store, n int, check func()) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	alloc := func() *structs.Allocation {
		a := &structs.Allocation{ID: fmt.Sprint("a", rng.IntN(30)), JobID: fmt.Sprint("j", rng.IntN(3)),
			NodeID: testNodes[rng.IntN(len(testNodes))], DesiredStatus: structs.AllocDesiredStatusRun}
		if v := rng.IntN(3); v < 2 {
			a.Job = testJob(a.JobID, uint64(v))
		}
		return a
	}
	for i := 0; i < n; i++ {
		var err error
		switch rng.IntN(4) {
		case 0:
			_, err = s.UpsertAllocs([]*structs.Allocation{alloc(), alloc()})
		case 1:
			_, err = s.ApplyPlan(&Plan{Allocs: []*structs.Allocation{alloc()}, DeleteAllocs: []string{alloc().ID}})
		case 2:
			_, err = s.DeleteAllocs([]string{alloc().ID})
		case 3:
			_, err = s.UpdateAllocsFromClient([]*structs.Allocation{{ID: alloc().ID, ClientStatus: structs.AllocClientStatusFailed}})
		}
		if err != nil {
			t.Fatal(err)
		}
		check()
	}
}

var testNodes = []string{"n1", "n2", "n3"}

// TestBoltRebuildsNodeIndex: a store written before the index existed
// gets it rebuilt at open.
func TestBoltRebuildsNodeIndex(t *testing.T) {
	s, path := openTest(t)
	randomAllocWrites(t, s, 50, func() {})
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketAllocByNode) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	checkNodeIndex(t, s2)
}

func checkNodeIndex(t *testing.T, s Store) {
	t.Helper()
	all, err := s.Allocs()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, byIndex func(string) ([]*structs.Allocation, error), field func(*structs.Allocation) string, values []string) {
		t.Helper()
		for _, v := range values {
			var want, got []string
			for _, a := range all {
				if field(a) == v {
					want = append(want, a.ID)
				}
			}
			found, err := byIndex(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range found {
				got = append(got, a.ID)
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s %s: index gives %v, scan gives %v", what, v, got, want)
			}
		}
	}
	check("node", s.AllocsByNode, func(a *structs.Allocation) string { return a.NodeID }, testNodes)
	check("job", s.AllocsByJob, func(a *structs.Allocation) string { return a.JobID }, []string{"j0", "j1", "j2"})
}

// TestAllocsByNodeReadsOnlyThatNode: another node's record is never
// decoded (an undecodable one would fail a full scan).
func TestAllocsByNodeReadsOnlyThatNode(t *testing.T) {
	s, _ := openTest(t)
	if _, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a1", NodeID: "n1"}, {ID: "b1", NodeID: "n2"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAllocs).Put([]byte("b1"), []byte("{garbage")) }); err != nil {
		t.Fatal(err)
	}
	got, err := s.AllocsByNode("n1")
	if err != nil || len(got) != 1 || got[0].ID != "a1" {
		t.Fatalf("AllocsByNode(n1) = %v, %v", got, err)
	}
}

// BenchmarkAllocsByNode reads one node's allocations among many nodes'.
func BenchmarkAllocsByNode(b *testing.B) {
	s, err := OpenBolt(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var allocs []*structs.Allocation
	for i := 0; i < 10000; i++ {
		allocs = append(allocs, &structs.Allocation{ID: fmt.Sprintf("a%05d", i), NodeID: fmt.Sprint("n", i%100),
			Job: testJob("web", 0)})
	}
	if _, err := s.UpsertAllocs(allocs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		got, err := s.AllocsByNode("n7")
		if err != nil || len(got) != 100 {
			b.Fatalf("got %d, %v", len(got), err)
		}
	}
}
