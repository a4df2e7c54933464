package state

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

func openTest(t *testing.T) (*BoltStore, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server", "state.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// storage is where one test's state lives in one backend: a file for
// bolt, a key prefix of the shared etcd member for etcd.
type storage struct {
	name   string
	openFn func(jobVersions int) (Store, error)
}

// open opens a store on the storage, closed at the end of the test.
func (st *storage) open(t *testing.T) Store { return st.openVersions(t, 0) }

func (st *storage) openVersions(t *testing.T, jobVersions int) Store {
	t.Helper()
	s, err := st.openFn(jobVersions)
	if err != nil {
		t.Fatalf("open %s store: %v", st.name, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// forEachBackend runs fn once per Store implementation, each on fresh
// storage.
func forEachBackend(t *testing.T, fn func(t *testing.T, st *storage)) {
	t.Run("bolt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "server", "state.db")
		fn(t, &storage{name: "bolt", openFn: func(versions int) (Store, error) {
			return OpenBoltOptions(path, Options{JobVersions: versions})
		}})
	})
	t.Run("etcd", func(t *testing.T) {
		c, prefix := newTestClient(t), testPrefix(t)
		fn(t, &storage{name: "etcd", openFn: func(versions int) (Store, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return OpenEtcd(ctx, c, EtcdOptions{Prefix: prefix, JobVersions: versions})
		}})
	})
}

// eachStore runs fn once per Store implementation with a fresh store.
func eachStore(t *testing.T, fn func(t *testing.T, s Store)) {
	forEachBackend(t, func(t *testing.T, st *storage) { fn(t, st.open(t)) })
}

func testJob(id string, version uint64) *structs.Job {
	return &structs.Job{ID: id, Name: id, Type: structs.JobTypeService, Version: version,
		TaskGroups: []*structs.TaskGroup{{Name: "web", Count: 1, Tasks: []*structs.Task{{Name: "t", Driver: "raw_exec",
			Config: map[string]any{"command": "/bin/sh", "args": []any{"-c", "true"}}}}}}}
}

func TestJobCRUDAndVersions(t *testing.T) { eachStore(t, testJobCRUDAndVersions) }

func testJobCRUDAndVersions(t *testing.T, s Store) {
	i1, err := s.UpsertJob(testJob("a", 0))
	if err != nil {
		t.Fatal(err)
	}
	i2, err := s.UpsertJob(testJob("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if i2 <= i1 {
		t.Fatalf("index not monotonic: %d then %d", i1, i2)
	}
	j, err := s.Job("a")
	if err != nil {
		t.Fatal(err)
	}
	if j.Version != 1 || j.CreateIndex != i1 || j.ModifyIndex != i2 || j.JobModifyIndex != i2 {
		t.Fatalf("unexpected job indexes: %+v", j)
	}
	vs, err := s.JobVersions("a")
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 0 {
		t.Fatalf("versions = %v, %v", vs, err)
	}
	if _, err := s.UpsertJob(testJob("b", 0)); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Jobs()
	if err != nil || len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" {
		t.Fatalf("jobs = %v, %v", jobs, err)
	}
	if _, err := s.UpdateJobStatus("a", structs.JobStatusRunning); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job("a"); j.Status != structs.JobStatusRunning || j.JobModifyIndex != i2 {
		t.Fatalf("status update changed the wrong fields: %+v", j)
	}
	if _, err := s.UpsertEval(&Evaluation{ID: "e1", JobID: "a", Status: EvalStatusComplete}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func() error{
		"job":      func() error { _, err := s.Job("a"); return err },
		"versions": func() error { _, err := s.JobVersions("a"); return err },
		"eval":     func() error { _, err := s.Eval("e1"); return err },
		"delete":   func() error { _, err := s.DeleteJob("a"); return err },
	} {
		if err := fn(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after delete: err = %v, want ErrNotFound", name, err)
		}
	}
	// Reads return copies: mutating one does not change the store.
	b, _ := s.Job("b")
	b.TaskGroups[0].Name = "changed"
	if b2, _ := s.Job("b"); b2.TaskGroups[0].Name != "web" {
		t.Fatal("Job returned shared data")
	}
}

func TestAllocUpdatesKeepAllocModifyIndex(t *testing.T) {
	eachStore(t, testAllocUpdatesKeepAllocModifyIndex)
}

func testAllocUpdatesKeepAllocModifyIndex(t *testing.T, s Store) {
	allocs := []*structs.Allocation{
		{ID: "1", JobID: "a", NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending},
		{ID: "2", JobID: "b", NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun},
		{ID: "3", JobID: "a", NodeID: "n2", DesiredStatus: structs.AllocDesiredStatusRun},
	}
	idx, err := s.UpsertAllocs(allocs)
	if err != nil {
		t.Fatal(err)
	}
	upd := &structs.Allocation{ID: "1", ClientStatus: structs.AllocClientStatusRunning,
		TaskStates:    map[string]*structs.TaskState{"t": {State: structs.TaskStateRunning}},
		NetworkStatus: &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.0.0.2"},
		DesiredStatus: structs.AllocDesiredStatusStop} // ignored: clients do not set desired status
	idx2, err := s.UpdateAllocsFromClient([]*structs.Allocation{upd, {ID: "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Alloc("1")
	if err != nil {
		t.Fatal(err)
	}
	if a.AllocModifyIndex != idx || a.ModifyIndex != idx2 || a.CreateIndex != idx {
		t.Fatalf("indexes: create %d modify %d allocModify %d (want %d/%d/%d)", a.CreateIndex, a.ModifyIndex, a.AllocModifyIndex, idx, idx2, idx)
	}
	if a.ClientStatus != structs.AllocClientStatusRunning || a.DesiredStatus != structs.AllocDesiredStatusRun ||
		a.TaskStates["t"].State != structs.TaskStateRunning || a.NetworkStatus.Address != "10.0.0.2" {
		t.Fatalf("client update merged wrongly: %+v", a)
	}
	tests := []struct {
		name string
		fn   func() ([]*structs.Allocation, error)
		want []string
	}{
		{"all", s.Allocs, []string{"1", "2", "3"}},
		{"by job", func() ([]*structs.Allocation, error) { return s.AllocsByJob("a") }, []string{"1", "3"}},
		{"by node", func() ([]*structs.Allocation, error) { return s.AllocsByNode("n1") }, []string{"1", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn()
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, a := range got {
				ids = append(ids, a.ID)
			}
			if len(ids) != len(tc.want) {
				t.Fatalf("got %v want %v", ids, tc.want)
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Fatalf("got %v want %v", ids, tc.want)
				}
			}
		})
	}
	if _, err := s.DeleteAllocs([]string{"1", "nope"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc("1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted alloc: %v", err)
	}
}

func TestReopenKeepsDataAndIndex(t *testing.T) { forEachBackend(t, testReopenKeepsDataAndIndex) }

func testReopenKeepsDataAndIndex(t *testing.T, st *storage) {
	s := st.open(t)
	if _, err := s.UpsertJob(testJob("a", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertNode(&structs.Node{ID: "n1", Name: "node1", Drivers: map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}); err != nil {
		t.Fatal(err)
	}
	idx := s.Index()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := st.open(t)
	if s2.Index() != idx {
		t.Fatalf("index after reopen = %d, want %d", s2.Index(), idx)
	}
	j, err := s2.Job("a")
	if err != nil || j.Version != 3 || j.TaskGroups[0].Tasks[0].Config["command"] != "/bin/sh" {
		t.Fatalf("job after reopen = %+v, %v", j, err)
	}
	n, err := s2.Node("n1")
	if err != nil || !n.Drivers["raw_exec"].Healthy {
		t.Fatalf("node after reopen = %+v, %v", n, err)
	}
	next, err := s2.UpsertJob(testJob("b", 0))
	if err != nil || next != idx+1 {
		t.Fatalf("next index = %d (%v), want %d", next, err, idx+1)
	}
}

func TestWaitIndex(t *testing.T) { eachStore(t, testWaitIndex) }

func testWaitIndex(t *testing.T, s Store) {
	start := s.Index()
	got := make(chan uint64, 1)
	go func() { got <- s.WaitIndex(context.Background(), start) }()
	if _, err := s.UpsertNode(&structs.Node{ID: "n"}); err != nil {
		t.Fatal(err)
	}
	select {
	case idx := <-got:
		if idx <= start {
			t.Fatalf("WaitIndex returned %d, want > %d", idx, start)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitIndex did not wake up")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if idx := s.WaitIndex(ctx, s.Index()+100); idx != s.Index() {
		t.Fatalf("cancelled WaitIndex = %d", idx)
	}
}

func TestConcurrentReadersAndWriters(t *testing.T) { eachStore(t, testConcurrentReadersAndWriters) }

func testConcurrentReadersAndWriters(t *testing.T, s Store) {
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			last := uint64(0)
			for i := 0; i < 25; i++ {
				idx, err := s.UpsertAllocs([]*structs.Allocation{{ID: string(rune('a'+w)) + "-" + string(rune('a'+i)), JobID: "j"}})
				if err != nil {
					errs <- err
					return
				}
				if idx <= last {
					errs <- errors.New("index went backwards")
					return
				}
				last = idx
			}
		}(w)
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if _, err := s.AllocsByJob("j"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := s.Allocs()
	if err != nil || len(all) != 100 {
		t.Fatalf("allocs = %d, %v", len(all), err)
	}
	if s.Index() != 100 {
		t.Fatalf("index = %d, want 100 (one per write)", s.Index())
	}
}

func TestUseAfterCloseIsErrClosed(t *testing.T) { eachStore(t, testUseAfterCloseIsErrClosed) }

func testUseAfterCloseIsErrClosed(t *testing.T, s Store) {
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Jobs(); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := s.UpsertJob(testJob("a", 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestDeleteNode(t *testing.T) { forEachBackend(t, testDeleteNode) }

func testDeleteNode(t *testing.T, st *storage) {
	s := st.open(t)
	for _, id := range []string{"n1", "n2"} {
		if _, err := s.UpsertNode(&structs.Node{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Index()
	idx, err := s.DeleteNode("n1")
	if err != nil || idx <= before {
		t.Fatalf("DeleteNode = %d, %v; want an index above %d", idx, err, before)
	}
	if _, err := s.Node("n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted node: %v", err)
	}
	if nodes, err := s.Nodes(); err != nil || len(nodes) != 1 || nodes[0].ID != "n2" {
		t.Fatalf("nodes after the delete = %v, %v; want n2", nodes, err)
	}
	if _, err := s.DeleteNode("n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting it again: %v, want ErrNotFound", err)
	}
}
