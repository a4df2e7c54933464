package state

import (
	"path/filepath"
	"testing"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

func TestClientStateRoundTripAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client", "state.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := db.NodeID(); err != nil || id != "" {
		t.Fatalf("fresh node id = %q, %v", id, err)
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"node id", func() error { return db.PutNodeID("node-1") }},
		{"alloc", func() error { return db.PutAlloc(&structs.Allocation{ID: "a1", Name: "j.g[0]"}) }},
		{"alloc 2", func() error { return db.PutAlloc(&structs.Allocation{ID: "a2"}) }},
		{"task", func() error {
			return db.PutTaskState("a1", "web", &LocalTaskState{
				Handle: &driver.TaskHandle{Version: 1, Config: &driver.TaskConfig{ID: "a1/web/x", Config: map[string]any{"command": "/bin/sh"}}, DriverState: []byte(`{"pid":42}`)},
				State:  &structs.TaskState{State: structs.TaskStateRunning, Restarts: 2}})
		}},
		{"network", func() error {
			return db.PutNetworkStatus("a1", &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "172.26.64.2"})
		}},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if id, _ := db.NodeID(); id != "node-1" {
		t.Fatalf("node id after reopen = %q", id)
	}
	allocs, err := db.Allocs()
	if err != nil || len(allocs) != 2 || allocs[0].Name != "j.g[0]" {
		t.Fatalf("allocs = %v, %v", allocs, err)
	}
	ts, err := db.TaskStates("a1")
	if err != nil || ts["web"] == nil || ts["web"].Handle.Config.ID != "a1/web/x" || string(ts["web"].Handle.DriverState) != `{"pid":42}` || ts["web"].State.Restarts != 2 {
		t.Fatalf("task states = %+v, %v", ts, err)
	}
	ns, err := db.NetworkStatus("a1")
	if err != nil || ns.Address != "172.26.64.2" {
		t.Fatalf("network = %+v, %v", ns, err)
	}
	if ns, _ := db.NetworkStatus("a2"); ns != nil {
		t.Fatal("a2 has a network status")
	}
	if err := db.DeleteAlloc("a1"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteAlloc("a1"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if ts, _ := db.TaskStates("a1"); len(ts) != 0 {
		t.Fatal("task states survived DeleteAlloc")
	}
	if allocs, _ := db.Allocs(); len(allocs) != 1 {
		t.Fatalf("allocs after delete = %d", len(allocs))
	}
}

// An allocation entry with task state but no record is reported apart.
func TestAllocsAndOrphans(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PutNodeID("n1"); err != nil {
		t.Fatal(err)
	}
	if err := db.PutTaskState("recordless", "web", &LocalTaskState{}); err != nil {
		t.Fatal(err)
	}
	allocs, orphans, err := db.AllocsAndOrphans()
	if err != nil || len(allocs) != 0 || len(orphans) != 1 || orphans[0] != "recordless" {
		t.Fatalf("allocs %v, orphans %v, err %v; want only the orphan recordless", allocs, orphans, err)
	}
}

// Whether an allocation's postrun hooks completed survives a reopen; an
// allocation stored without the record (state of an older meshlet) reads
// as not done, and recording it for a forgotten allocation leaves no entry.
func TestPostrunDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "new"} {
		if err := db.PutAlloc(&structs.Allocation{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutPostrunDone("new"); err != nil {
		t.Fatal(err)
	}
	if err := db.PutPostrunDone("forgotten"); err != nil {
		t.Fatalf("forgotten allocation: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, want := range map[string]bool{"old": false, "new": true, "forgotten": false} {
		if done, err := db.PostrunDone(id); err != nil || done != want {
			t.Errorf("%s: PostrunDone = %v, %v; want %v", id, done, err, want)
		}
	}
	if allocs, orphans, err := db.AllocsAndOrphans(); err != nil || len(allocs) != 2 || len(orphans) != 0 {
		t.Errorf("allocs %d, orphans %v, err %v", len(allocs), orphans, err)
	}
}
