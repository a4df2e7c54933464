package state

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/structs"
)

// rawKeys returns every key under prefix with its value and, if withRev,
// its ModRevision: what "nothing changed" compares.
func rawKeys(t *testing.T, c *clientv3.Client, prefix string, withRev bool) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range resp.Kvs {
		v := string(e.Value)
		if withRev {
			v += fmt.Sprintf(" @%d", e.ModRevision)
		}
		out[strings.TrimPrefix(string(e.Key), prefix)] = v
	}
	return out
}

// populate writes jobs (two versions of one), allocations, evaluations and
// nodes through the store.
func populate(t *testing.T, s *EtcdStore, allocs int) {
	t.Helper()
	must2(t)(s.UpsertJob(testJob("api", 0)))
	must2(t)(s.UpsertJob(testJob("api", 1)))
	must2(t)(s.ApplyPlan(planOf("web", allocs, "web[0]")))
	must2(t)(s.UpsertNode(&structs.Node{ID: "n1", Name: "one", Status: structs.NodeStatusReady}))
	must2(t)(s.UpsertEval(&Evaluation{ID: "api-eval", JobID: "api"}))
}

func must2(t *testing.T) func(uint64, error) {
	return func(_ uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func snapshotOf(t *testing.T, s *EtcdStore) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Snapshot(context.Background(), &buf); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return buf.Bytes()
}

// view is what the store's readers return.
type view struct {
	Jobs   []*structs.Job
	Allocs []*structs.Allocation
	Nodes  []*structs.Node
	Evals  []*Evaluation
}

func viewOf(t *testing.T, s *EtcdStore) view {
	t.Helper()
	var v view
	var err [4]error
	v.Jobs, err[0] = s.Jobs()
	v.Allocs, err[1] = s.Allocs()
	v.Nodes, err[2] = s.Nodes()
	v.Evals, err[3] = s.Evals()
	if e := errors.Join(err[:]...); e != nil {
		t.Fatal(e)
	}
	return v
}

// change moves the state away from a snapshot: a new job, a deleted
// allocation, a changed node, a new evaluation.
func change(t *testing.T, s *EtcdStore, deleteAllocs ...string) {
	t.Helper()
	must2(t)(s.UpsertJob(testJob("new", 0)))
	must2(t)(s.DeleteAllocs(deleteAllocs))
	must2(t)(s.UpsertNode(&structs.Node{ID: "n1", Name: "one", Status: structs.NodeStatusDown}))
	must2(t)(s.UpsertEval(&Evaluation{ID: "new-eval", JobID: "new"}))
}

// checkRestored: the keys (but the index) and the readers' view are the
// snapshot's, the index is above both the snapshot's and the changed
// state's, and the store writes again.
func checkRestored(t *testing.T, s *EtcdStore, c *clientv3.Client, prefix string, want map[string]string, wantView view, above uint64) {
	t.Helper()
	got := rawKeys(t, c, prefix, false)
	idx, err := strconv.ParseUint(got["index"], 10, 64)
	if err != nil {
		t.Fatalf("index after restore = %q", got["index"])
	}
	delete(got, "index")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keys after restore differ from the snapshot's:\n got %v\nwant %v", got, want)
	}
	if gv := viewOf(t, s); !reflect.DeepEqual(gv, wantView) {
		t.Errorf("state after restore = %+v, want %+v", gv, wantView)
	}
	if idx <= above || s.Index() != idx {
		t.Errorf("index after restore = %d (store says %d), want one above %d", idx, s.Index(), above)
	}
	next, err := s.UpsertJob(testJob("after", 0))
	if err != nil || next != idx+1 {
		t.Errorf("write after restore: index %d, %v; want %d", next, err, idx+1)
	}
}

// TestEtcdSnapshotRestore: snapshot, change the state, restore: the state
// is the snapshot's again (in one transaction on this member).
func TestEtcdSnapshotRestore(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	populate(t, s, 3)
	snap := snapshotOf(t, s)
	want := rawKeys(t, c, prefix, false)
	delete(want, "index")
	wantView := viewOf(t, s)
	if len(wantView.Allocs) != 3 || len(wantView.Jobs) != 2 || len(wantView.Evals) != 2 {
		t.Fatalf("populated state = %+v", wantView)
	}
	change(t, s, "web-000")
	if _, err := s.Alloc("web-000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted allocation still there: %v", err)
	}
	above := s.Index()
	if err := s.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	checkRestored(t, s, c, prefix, want, wantView, above)
	// Another server on the prefix opens it and sees the same index.
	other := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	if other.ClusterID() != s.ClusterID() || other.Index() != s.Index() {
		t.Errorf("another store sees cluster %s index %d, want %s %d", other.ClusterID(), other.Index(), s.ClusterID(), s.Index())
	}
}

// TestEtcdRestoreInBatches: against a member with etcd's default limits
// the restore does not fit one transaction and runs in batches.
func TestEtcdRestoreInBatches(t *testing.T) {
	e, err := startMember(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c, prefix := newClient(t, e.Clients[0].Addr().String()), testPrefix(t)
	var logs bytes.Buffer
	s, err := tryOpenEtcd(c, EtcdOptions{Prefix: prefix, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	populate(t, s, 30)
	must2(t)(s.ApplyPlan(planOf("db", 30, "db[0]")))
	snap := snapshotOf(t, s)
	want := rawKeys(t, c, prefix, false)
	delete(want, "index")
	if len(want) < 2*restoreBatchOps {
		t.Fatalf("only %d keys: too few to need batches", len(want))
	}
	wantView := viewOf(t, s)
	var gone []string
	for i := 0; i < 25; i++ {
		gone = append(gone, fmt.Sprintf("db-%03d", i))
	}
	change(t, s, gone...)
	above := s.Index()
	if err := s.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !strings.Contains(logs.String(), "restoring in batches") {
		t.Errorf("the restore fit one transaction under the default limits; logs:\n%s", logs.String())
	}
	checkRestored(t, s, c, prefix, want, wantView, above)
}

// TestEtcdRestoreInterrupted: a batched restore stopped after its lock
// blocks every write, new stores and snapshots, until it is run again.
func TestEtcdRestoreInterrupted(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	populate(t, s, 2)
	snap := snapshotOf(t, s)
	want := rawKeys(t, c, prefix, false)
	delete(want, "index")
	wantView := viewOf(t, s)
	change(t, s, "web-001")
	above := s.Index()

	d, err := readSnapshot(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := s.planRestore(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	locked, err := s.lockForRestore(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.commitGuarded(ctx, "restore a batch", locked, s.etcdOps(p.ops[:1])); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertJob(testJob("x", 0)); err == nil || !strings.Contains(err.Error(), "run the restore again") {
		t.Errorf("write during an interrupted restore: %v", err)
	}
	if _, err := tryOpenEtcd(c, EtcdOptions{Prefix: prefix}); err == nil || !strings.Contains(err.Error(), "restoring") {
		t.Errorf("OpenEtcd during an interrupted restore: %v", err)
	}
	if err := s.Snapshot(ctx, io.Discard); !errors.Is(err, ErrRestoring) {
		t.Errorf("Snapshot during an interrupted restore: %v, want ErrRestoring", err)
	}
	if err := s.Restore(ctx, bytes.NewReader(snap), RestoreOptions{}); err != nil {
		t.Fatalf("Restore run again: %v", err)
	}
	if s.Index() <= p.index {
		t.Errorf("index %d after the second restore, the first aimed at %d", s.Index(), p.index)
	}
	checkRestored(t, s, c, prefix, want, wantView, above)
}

// corruptions of a snapshot, each of which Restore must refuse.
func corruptions(t *testing.T, snap []byte) map[string][]byte {
	t.Helper()
	flip := func(i int) []byte {
		b := bytes.Clone(snap)
		b[i] ^= 0xff
		return b
	}
	out := map[string][]byte{
		"empty":          nil,
		"not gzip":       []byte("{\"meshlet_snapshot\":1}\n"),
		"truncated half": snap[:len(snap)/2],
		"truncated end":  snap[:len(snap)-3],
		"trailing data":  append(bytes.Clone(snap), snap...),
	}
	for _, i := range []int{10, len(snap) / 3, len(snap) / 2, len(snap) - 9, len(snap) - 6, len(snap) - 1} {
		out[fmt.Sprintf("byte %d flipped", i)] = flip(i)
	}
	// A value changed and the stream compressed again: only the SHA-256
	// tells.
	zr, err := gzip.NewReader(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(plain))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	lines[2] = strings.Replace(lines[2], `"v":"`, `"v":"AAAA`, 1)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = io.WriteString(zw, strings.Join(lines, "\n")+"\n")
	_ = zw.Close()
	out["value changed"] = buf.Bytes()
	return out
}

// TestEtcdRestoreRefusesDamage: a damaged snapshot is refused with
// ErrBadSnapshot and changes nothing.
func TestEtcdRestoreRefusesDamage(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	populate(t, s, 2)
	snap := snapshotOf(t, s)
	change(t, s, "web-000")
	before := rawKeys(t, c, prefix, true)
	for name, bad := range corruptions(t, snap) {
		err := s.Restore(context.Background(), bytes.NewReader(bad), RestoreOptions{Force: true})
		if !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
	}
	if after := rawKeys(t, c, prefix, true); !reflect.DeepEqual(after, before) {
		t.Errorf("refused restores changed the state:\n got %v\nwant %v", after, before)
	}
	if err := s.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{}); err != nil {
		t.Errorf("the intact snapshot: %v", err)
	}
}

// TestEtcdRestoreOtherCluster: a snapshot of another cluster is refused
// unless forced; forced, its data moves in under this cluster's ID.
func TestEtcdRestoreOtherCluster(t *testing.T) {
	c := newTestClient(t)
	a := openEtcdTest(t, c, EtcdOptions{Prefix: testPrefix(t)})
	bPrefix := testPrefix(t)
	b := openEtcdTest(t, c, EtcdOptions{Prefix: bPrefix})
	populate(t, a, 2)
	must2(t)(b.UpsertJob(testJob("b-only", 0)))
	snap := snapshotOf(t, a)
	before := rawKeys(t, c, bPrefix, true)
	err := b.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{})
	if !errors.Is(err, ErrSnapshotCluster) || !strings.Contains(err.Error(), a.ClusterID()) {
		t.Fatalf("Restore of another cluster's snapshot = %v, want ErrSnapshotCluster naming %s", err, a.ClusterID())
	}
	if after := rawKeys(t, c, bPrefix, true); !reflect.DeepEqual(after, before) {
		t.Errorf("refused restore changed the state")
	}
	if err := b.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{Force: true}); err != nil {
		t.Fatalf("forced Restore: %v", err)
	}
	if got, want := viewOf(t, b), viewOf(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("state after a forced restore = %+v, want %+v", got, want)
	}
	if id := rawKeys(t, c, bPrefix, false)["cluster_id"]; id != b.ClusterID() || id == a.ClusterID() {
		t.Errorf("cluster_id after a forced restore = %s, want this cluster's %s", id, b.ClusterID())
	}
}

// TestEtcdRestoreNeedsLeadership: under a leader guard that no longer
// holds, the restore fails with ErrNotLeader and changes nothing.
func TestEtcdRestoreNeedsLeadership(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	populate(t, s, 1)
	snap := snapshotOf(t, s)
	change(t, s, "web-000")
	before := rawKeys(t, c, prefix, true)
	s.SetLeader(prefix+"no-such-leader", 7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Restore(ctx, bytes.NewReader(snap), RestoreOptions{}); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Restore without leadership = %v, want ErrNotLeader", err)
	}
	if after := rawKeys(t, c, prefix, true); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused restore changed the state")
	}
}
