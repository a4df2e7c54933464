package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// legacyState writes a bbolt state file as a server before etcd did: a
// node, a job with three versions and a status, an evaluation and two
// allocations, one of them running with client-reported state.
func legacyState(t *testing.T) (path, marker string, want *BoltStore) {
	t.Helper()
	dir := t.TempDir()
	path, marker = filepath.Join(dir, "server", "state.db"), filepath.Join(dir, "server-state.marker")
	s, err := OpenBoltOptions(path, Options{MarkerPath: marker})
	if err != nil {
		t.Fatal(err)
	}
	must(t, func() error {
		_, err := s.UpsertNode(&structs.Node{ID: "n1", Name: "n1", Status: structs.NodeStatusReady})
		return err
	}())
	for v := range uint64(3) {
		must(t, func() error { _, err := s.UpsertJob(testJob("web", v)); return err }())
	}
	must(t, func() error { _, err := s.UpdateJobStatus("web", "running"); return err }())
	job, _ := s.Job("web")
	must(t, func() error {
		_, err := s.UpsertEval(&Evaluation{ID: "e1", JobID: "web", Status: EvalStatusComplete})
		return err
	}())
	allocs := []*structs.Allocation{
		{ID: "a1", JobID: "web", NodeID: "n1", Job: job, DesiredStatus: structs.AllocDesiredStatusRun},
		{ID: "a2", JobID: "web", NodeID: "n1", Job: job, DesiredStatus: structs.AllocDesiredStatusRun},
	}
	must(t, func() error { _, err := s.UpsertAllocs(allocs); return err }())
	must(t, func() error {
		_, err := s.UpdateAllocsFromClient([]*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning,
			ClientDescription: "Tasks are running"}})
		return err
	}())
	return path, marker, s
}

func TestMigrateBoltMovesEverythingOnce(t *testing.T) {
	ctx := context.Background()
	path, marker, src := legacyState(t)
	wantID, wantIndex := src.ClusterID(), src.Index()
	a1Before, _ := src.Alloc("a1")
	must(t, src.Close())

	c := newTestClient(t)
	opts := EtcdOptions{Prefix: testPrefix(t), MarkerPath: marker}
	if err := MigrateBolt(ctx, path, c, opts); err != nil {
		t.Fatalf("MigrateBolt: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after the import (stat: %v)", path, err)
	}
	if _, err := os.Stat(path + MigratedSuffix); err != nil {
		t.Errorf("the imported file was not kept as %s: %v", path+MigratedSuffix, err)
	}
	s := openEtcdTest(t, c, opts) // the marker names the same cluster
	if s.ClusterID() != wantID {
		t.Errorf("cluster ID %s, want the file's %s", s.ClusterID(), wantID)
	}
	if s.Index() <= wantIndex {
		t.Errorf("index %d, want above the file's %d", s.Index(), wantIndex)
	}
	job, err := s.Job("web")
	if err != nil || job.Version != 2 || job.Status != "running" {
		t.Fatalf("job web = %+v, %v; want version 2, status running", job, err)
	}
	if vs, _ := s.JobVersions("web"); len(vs) != 3 {
		t.Errorf("%d versions of web, want 3", len(vs))
	}
	if e, err := s.Eval("e1"); err != nil || e.Status != EvalStatusComplete {
		t.Errorf("eval e1 = %+v, %v", e, err)
	}
	a1, err := s.Alloc("a1")
	if err != nil {
		t.Fatal(err)
	}
	if a1.ClientStatus != structs.AllocClientStatusRunning || a1.Job == nil || a1.Job.Version != 2 {
		t.Errorf("alloc a1 = status %q job %+v, want running with job version 2", a1.ClientStatus, a1.Job)
	}
	if a1.AllocModifyIndex <= a1Before.AllocModifyIndex {
		t.Errorf("a1's AllocModifyIndex %d is not above what clients saw (%d)", a1.AllocModifyIndex, a1Before.AllocModifyIndex)
	}
	if byNode, _ := s.AllocsByNode("n1"); len(byNode) != 2 {
		t.Errorf("%d allocations on n1, want 2", len(byNode))
	}
	// A second start finds nothing to move.
	if err := MigrateBolt(ctx, path, c, opts); err != nil {
		t.Fatalf("second MigrateBolt: %v", err)
	}
}

// TestMigrateBoltRefusesAnotherCluster: a prefix that holds another
// cluster is never overwritten and the file stays in place.
func TestMigrateBoltRefusesAnotherCluster(t *testing.T) {
	path, marker, src := legacyState(t)
	must(t, src.Close())
	c := newTestClient(t)
	prefix := testPrefix(t)
	other := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	if _, err := other.UpsertNode(&structs.Node{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	err := MigrateBolt(context.Background(), path, c, EtcdOptions{Prefix: prefix, MarkerPath: marker})
	if !errors.Is(err, ErrStateLost) {
		t.Fatalf("MigrateBolt onto another cluster: %v, want ErrStateLost", err)
	}
	if _, serr := os.Stat(path); serr != nil {
		t.Errorf("the file was moved although the import was refused: %v", serr)
	}
	if _, err := other.Node("other"); err != nil {
		t.Errorf("the other cluster's state was touched: %v", err)
	}
}

// TestMigrateBoltStartsOverAfterACutImport: an import cut short (the
// "migrating" key still set) is wiped and done again.
func TestMigrateBoltStartsOverAfterACutImport(t *testing.T) {
	ctx := context.Background()
	path, marker, src := legacyState(t)
	id := src.ClusterID()
	must(t, src.Close())
	c := newTestClient(t)
	prefix := testPrefix(t)
	for k, v := range map[string]string{"cluster_id": id, "index": "1", "migrating": path, "nodes/stale": "{}"} {
		if _, err := c.Put(ctx, prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	opts := EtcdOptions{Prefix: prefix, MarkerPath: marker}
	if err := MigrateBolt(ctx, path, c, opts); err != nil {
		t.Fatalf("MigrateBolt after a cut import: %v", err)
	}
	s := openEtcdTest(t, c, opts)
	nodes, _ := s.Nodes()
	if len(nodes) != 1 || nodes[0].ID != "n1" {
		t.Errorf("nodes after the redone import = %+v, want only n1", nodes)
	}
	if countKeys(t, c, prefix, "migrating") != 0 {
		t.Error("the migrating key is still set")
	}
}
