package agent

import (
	"bytes"
	"io"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestSnapshotSaveAndRestore: a snapshot taken through the official
// client and restored later brings the state back (a job registered in
// between is gone); a damaged snapshot is refused and changes nothing.
func TestSnapshotSaveAndRestore(t *testing.T) {
	a := startAgent(t, t.TempDir())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: "http://" + a.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Operator().Snapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(snap) == 0 {
		t.Fatalf("snapshot: %d bytes, %v", len(snap), err)
	}
	job := &nomadapi.Job{ID: ptr("after-snapshot"), Name: ptr("after-snapshot"), Datacenters: []string{"dc1"},
		TaskGroups: []*nomadapi.TaskGroup{{Name: ptr("g"), Count: ptr(0),
			Tasks: []*nomadapi.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), snap...)
	bad[len(bad)/2] ^= 0xff
	if _, err := c.Operator().SnapshotRestore(bytes.NewReader(bad), nil); err == nil {
		t.Fatal("a damaged snapshot was restored")
	}
	if _, _, err := c.Jobs().Info("after-snapshot", nil); err != nil {
		t.Fatalf("the refused restore changed the state: %v", err)
	}
	if _, err := c.Operator().SnapshotRestore(bytes.NewReader(snap), nil); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, _, err := c.Jobs().Info("after-snapshot", nil); err == nil {
		t.Error("the job registered after the snapshot is still there after the restore")
	}
	nodes, _, err := c.Nodes().List(nil)
	if err != nil || len(nodes) != 1 {
		t.Errorf("nodes after the restore = %d, %v; want this node", len(nodes), err)
	}
}

func ptr[T any](v T) *T { return &v }
