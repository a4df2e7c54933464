package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/structs"
)

func openEtcdTest(t *testing.T, c *clientv3.Client, opts EtcdOptions) *EtcdStore {
	t.Helper()
	s, err := tryOpenEtcd(c, opts)
	if err != nil {
		t.Fatalf("OpenEtcd: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func tryOpenEtcd(c *clientv3.Client, opts EtcdOptions) (*EtcdStore, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return OpenEtcd(ctx, c, opts)
}

// countKeys counts the keys under the store's prefix + sub.
func countKeys(t *testing.T, c *clientv3.Client, prefix, sub string) int {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix+sub, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}

// TestEtcdTwoServersRacing: two stores on one prefix write concurrently;
// client updates of one server are never lost to plans of the other
// (computed from older reads), and every write advances the index once.
func TestEtcdTwoServersRacing(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	a := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	b := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	const shared, rounds = 3, 15
	var seed []*structs.Allocation
	for i := 0; i < shared; i++ {
		seed = append(seed, &structs.Allocation{ID: fmt.Sprint("s", i), JobID: "web", NodeID: "n1", Job: testJob("web", 0)})
	}
	start, err := a.UpsertAllocs(seed)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*shared)
	for g := 0; g < shared; g++ {
		wg.Add(2)
		go func() { // a client reporting through server a
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				u := &structs.Allocation{ID: fmt.Sprint("s", g), ClientStatus: structs.AllocClientStatusRunning,
					ClientDescription: fmt.Sprint(i)}
				if _, err := a.UpdateAllocsFromClient([]*structs.Allocation{u}); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // plans of server b rewriting every shared allocation
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				p := &Plan{Job: testJob("web", uint64(i%2)), Evals: []*Evaluation{{ID: fmt.Sprint("e", g, "-", i), JobID: "web"}}}
				for _, s := range seed {
					cp := *s
					cp.DesiredDescription = fmt.Sprint("plan ", g, "-", i)
					p.Allocs = append(p.Allocs, &cp)
				}
				p.Allocs = append(p.Allocs, &structs.Allocation{ID: fmt.Sprint("p", g, "-", i), JobID: "web", NodeID: "n2"})
				if _, err := b.ApplyPlan(p); err != nil {
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
	want := start + 2*shared*rounds
	for _, s := range []*EtcdStore{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got := s.WaitIndex(ctx, want-1)
		cancel()
		if got != want {
			t.Fatalf("index = %d, want %d (one per write)", got, want)
		}
	}
	for i := 0; i < shared; i++ {
		al, err := b.Alloc(fmt.Sprint("s", i))
		if err != nil || al.ClientDescription != fmt.Sprint(rounds-1) || al.ClientStatus != structs.AllocClientStatusRunning {
			t.Fatalf("alloc s%d = %+v, %v: a client update was lost", i, al, err)
		}
	}
	if got, err := a.AllocsByNode("n2"); err != nil || len(got) != shared*rounds {
		t.Fatalf("placed %d allocations (%v), want %d", len(got), err, shared*rounds)
	}
	if got, err := a.EvalsByJob("web"); err != nil || len(got) != shared*rounds {
		t.Fatalf("stored %d evaluations (%v), want %d", len(got), err, shared*rounds)
	}
}

func TestEtcdWaitIndexWakesForAnotherServer(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	a := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	b := openEtcdTest(t, newTestClient(t), EtcdOptions{Prefix: prefix})
	// A compaction of the history does not stop the watch.
	resp, err := c.Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(context.Background(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		start := a.Index()
		got := make(chan uint64, 1)
		go func() { got <- a.WaitIndex(context.Background(), start) }()
		idx, err := b.UpsertNode(&structs.Node{ID: fmt.Sprint("n", i)})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-got:
			if w != idx {
				t.Fatalf("WaitIndex = %d, want %d", w, idx)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitIndex did not wake for another server's write")
		}
	}
	if n, err := a.Node("n2"); err != nil || n.ModifyIndex != a.Index() {
		t.Fatalf("node through a = %+v, %v", n, err)
	}
}

func TestEtcdLeaderGuard(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	leaderKey := prefix + "election/leader"
	put, err := c.Put(context.Background(), leaderKey, "me")
	if err != nil {
		t.Fatal(err)
	}
	s.SetLeader(leaderKey, put.Header.Revision)
	if _, err := s.UpsertJob(testJob("a", 0)); err != nil {
		t.Fatalf("write as leader: %v", err)
	}
	// Another server's term: the key was deleted and created again.
	if _, err := c.Delete(context.Background(), leaderKey); err != nil {
		t.Fatal(err)
	}
	before := s.Index()
	if _, err := s.UpsertJob(testJob("b", 0)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write without the leader key: %v, want ErrNotLeader", err)
	}
	if _, err := c.Put(context.Background(), leaderKey, "other"); err != nil {
		t.Fatal(err)
	}
	writes := map[string]func() error{
		"job":    func() error { _, err := s.UpsertJob(testJob("b", 0)); return err },
		"plan":   func() error { _, err := s.ApplyPlan(&Plan{Allocs: []*structs.Allocation{{ID: "x"}}}); return err },
		"delete": func() error { _, err := s.DeleteJob("a"); return err },
	}
	for name, fn := range writes {
		if err := fn(); !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s under another leader: %v, want ErrNotLeader", name, err)
		}
	}
	if _, err := s.Job("b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job written by a deposed leader: %v", err)
	}
	if _, err := s.Job("a"); err != nil {
		t.Fatalf("job deleted by a deposed leader: %v", err)
	}
	idx, _, err := s.readIndex(context.Background())
	if err != nil || idx != before {
		t.Fatalf("index moved from %d to %d (%v)", before, idx, err)
	}
	// A deposed leader (its term ended: ClearLeader) writes nothing, even
	// though no guard key is left to compare: a plan it computed in the
	// lost term must not commit unguarded.
	s.ClearLeader()
	if _, err := s.UpsertJob(testJob("b", 0)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write after the term ended: %v, want ErrNotLeader", err)
	}
	// Elected again (a new key), it writes.
	resp, err := c.Put(context.Background(), leaderKey+"-2", "me")
	if err != nil {
		t.Fatal(err)
	}
	s.SetLeader(leaderKey+"-2", resp.Header.Revision)
	if _, err := s.UpsertJob(testJob("b", 0)); err != nil {
		t.Fatalf("write in a new term: %v", err)
	}
}

// TestEtcdPlanStoresJobOnce: a plan's allocations share one stored copy
// of their job, which goes with the last allocation using it.
func TestEtcdPlanStoresJobOnce(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	p := &Plan{Job: testJob("web", 0)}
	var ids []string
	for i := 0; i < 100; i++ {
		id := fmt.Sprintf("a%03d", i)
		ids = append(ids, id)
		p.Allocs = append(p.Allocs, &structs.Allocation{ID: id, JobID: "web", NodeID: fmt.Sprint("n", i%4), Job: testJob("web", 0)})
	}
	idx, err := s.ApplyPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, c, prefix, "alloc_jobs/"); n != 1 {
		t.Fatalf("%d alloc_jobs keys, want 1", n)
	}
	allocs, err := s.AllocsByJob("web")
	if err != nil || len(allocs) != 100 {
		t.Fatalf("AllocsByJob = %d, %v", len(allocs), err)
	}
	for _, a := range allocs {
		if a.Job == nil || a.Job.ID != "web" || a.Job.JobModifyIndex != idx || a.Job.TaskGroups[0].Tasks[0].Driver != "raw_exec" {
			t.Fatalf("alloc %s has job %+v, want the stored job of index %d", a.ID, a.Job, idx)
		}
	}
	allocs[0].Job.Name = "changed" // callers own what they read
	if a, _ := s.Alloc(allocs[0].ID); a.Job.Name != "web" {
		t.Fatal("Alloc returned a shared job")
	}
	// Half move to version 1: two snapshots, then one once the rest go.
	var moved []*structs.Allocation
	for _, a := range allocs[:50] {
		a.Job = testJob("web", 1)
		moved = append(moved, a)
	}
	if _, err := s.UpsertAllocs(moved); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, c, prefix, "alloc_jobs/"); n != 2 {
		t.Fatalf("%d alloc_jobs keys after an update of half, want 2", n)
	}
	if _, err := s.DeleteAllocs(ids[50:]); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, c, prefix, "alloc_jobs/"); n != 1 {
		t.Fatalf("%d alloc_jobs keys, want 1", n)
	}
	if a, err := s.Alloc(ids[0]); err != nil || a.Job.Version != 1 {
		t.Fatalf("alloc after update = %+v, %v", a, err)
	}
	if _, err := s.DeleteAllocs(ids); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"alloc_jobs/", "allocs/", "idx/"} {
		if n := countKeys(t, c, prefix, sub); n != 0 {
			t.Fatalf("%d %s keys left after deleting every allocation", n, sub)
		}
	}
}

// TestEtcdJobSnapshotsFollowReferences: after random writes, exactly the
// job snapshots some allocation refers to are stored.
func TestEtcdJobSnapshotsFollowReferences(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	randomAllocWrites(t, s, 100, func() {
		all, err := s.Allocs()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, a := range all {
			if a.Job != nil {
				want[fmt.Sprint(a.Job.ID, "/", a.Job.Version)] = true
			}
		}
		if n := countKeys(t, c, prefix, "alloc_jobs/"); n != len(want) {
			t.Fatalf("%d job snapshots stored, %d referenced", n, len(want))
		}
	})
}

func TestEtcdAllocsByNodeReadsOnlyThatNode(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	if _, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a1", NodeID: "n1", JobID: "j1"}, {ID: "b1", NodeID: "n2", JobID: "j2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(context.Background(), prefix+"allocs/b1", "{garbage"); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func() ([]*structs.Allocation, error){
		"node": func() ([]*structs.Allocation, error) { return s.AllocsByNode("n1") },
		"job":  func() ([]*structs.Allocation, error) { return s.AllocsByJob("j1") },
	} {
		if got, err := fn(); err != nil || len(got) != 1 || got[0].ID != "a1" {
			t.Fatalf("by %s = %v, %v", name, got, err)
		}
	}
	if _, err := s.Allocs(); err == nil {
		t.Fatal("a full scan decoded the garbage")
	}
}

// TestEtcdIDsWithSlashes: IDs are escaped, so a node "n" does not see the
// allocations of node "n/x".
func TestEtcdIDsWithSlashes(t *testing.T) {
	s := openEtcdTest(t, newTestClient(t), EtcdOptions{Prefix: testPrefix(t)})
	if _, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a/1", NodeID: "n"}, {ID: "b%2F", NodeID: "n/x"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.AllocsByNode("n")
	if err != nil || len(got) != 1 || got[0].ID != "a/1" {
		t.Fatalf("AllocsByNode(n) = %v, %v", got, err)
	}
	if got, err := s.AllocsByNode("n/x"); err != nil || len(got) != 1 || got[0].ID != "b%2F" {
		t.Fatalf("AllocsByNode(n/x) = %v, %v", got, err)
	}
}

func TestEtcdClusterIDAndMarker(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	marker := filepath.Join(t.TempDir(), "state.marker")
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix, MarkerPath: marker})
	id := s.ClusterID()
	raw, err := os.ReadFile(marker)
	if err != nil || id == "" || !strings.Contains(string(raw), id) {
		t.Fatalf("marker %q (%v) does not name cluster %q", raw, err, id)
	}
	if other := openEtcdTest(t, c, EtcdOptions{Prefix: prefix}); other.ClusterID() != id {
		t.Fatalf("second server sees cluster %q, want %q", other.ClusterID(), id)
	}
	if _, err := s.UpsertJob(testJob("a", 0)); err != nil {
		t.Fatal(err)
	}
	// The prefix lost its state: refused, not started empty.
	if _, err := c.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := tryOpenEtcd(c, EtcdOptions{Prefix: prefix, MarkerPath: marker}); !errors.Is(err, ErrStateLost) {
		t.Fatalf("open of an emptied prefix: %v, want ErrStateLost", err)
	}
	if _, err := c.Put(context.Background(), prefix+"cluster_id", "another"); err != nil {
		t.Fatal(err)
	}
	if _, err := tryOpenEtcd(c, EtcdOptions{Prefix: prefix, MarkerPath: marker}); !errors.Is(err, ErrStateLost) {
		t.Fatalf("open of another cluster's prefix: %v, want ErrStateLost", err)
	}
	if _, err := c.Put(context.Background(), prefix+"cluster_id", id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(context.Background(), prefix+"format", "99"); err != nil {
		t.Fatal(err)
	}
	if _, err := tryOpenEtcd(c, EtcdOptions{Prefix: prefix, MarkerPath: marker}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a newer format: %v, want ErrCorrupt", err)
	}
}

// TestEtcdNodeAllocsIndex: the node index tells when a node has something
// to act on (a server-side change, an allocation stored terminal, a
// removal) without decoding allocations; a client's non-terminal status
// update leaves it alone; entries written before they carried an index
// make it answer "cannot tell".
func TestEtcdNodeAllocsIndex(t *testing.T) {
	c, prefix := newTestClient(t), testPrefix(t)
	s := openEtcdTest(t, c, EtcdOptions{Prefix: prefix})
	check := func(what string, wantIdx uint64, wantCount int) {
		t.Helper()
		idx, n, ok, err := s.NodeAllocsIndex("n1")
		if err != nil || !ok || idx != wantIdx || n != wantCount {
			t.Fatalf("%s: NodeAllocsIndex = %d, %d, %v, %v; want %d, %d", what, idx, n, ok, err, wantIdx, wantCount)
		}
	}
	placed, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a1", NodeID: "n1", JobID: "j"}, {ID: "a2", NodeID: "n1", JobID: "j"},
		{ID: "b1", NodeID: "n2", JobID: "j"}})
	if err != nil {
		t.Fatal(err)
	}
	check("placed", placed, 2)
	if _, err := s.UpdateAllocsFromClient([]*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}); err != nil {
		t.Fatal(err)
	}
	check("running reported", placed, 2)
	stopped, err := s.UpsertAllocs([]*structs.Allocation{{ID: "a2", NodeID: "n1", JobID: "j", DesiredStatus: structs.AllocDesiredStatusStop}})
	if err != nil {
		t.Fatal(err)
	}
	check("stop desired", stopped, 2)
	failed, err := s.UpdateAllocsFromClient([]*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusFailed}})
	if err != nil {
		t.Fatal(err)
	}
	check("failed reported", failed, 2)
	if _, err := s.DeleteAllocs([]string{"a2"}); err != nil {
		t.Fatal(err)
	}
	check("a2 deleted", failed, 1)
	if _, err := c.Put(context.Background(), prefix+"idx/alloc_node/n1/a3", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := s.NodeAllocsIndex("n1"); ok || err != nil {
		t.Fatalf("an entry without an index: ok=%v, %v; want ok=false", ok, err)
	}
	if _, err := c.Put(context.Background(), prefix+"idx/alloc_node/n1/a3", "x"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.NodeAllocsIndex("n1"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a garbled entry: %v; want ErrCorrupt", err)
	}
}
