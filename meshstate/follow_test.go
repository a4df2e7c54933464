package meshstate

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// noKeys fails the test when b's JSON carries key material.
func noKeys(t testing.TB, b Batch) {
	t.Helper()
	j, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(j), "PRIVATE KEY") {
		t.Fatalf("batch carries a private key: %s", j)
	}
}

func TestSnapshot(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	empty, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !empty.Reset || empty.Revision == 0 || len(empty.Allocs) != 0 || empty.Roots != nil ||
		empty.Intentions == nil || empty.Intentions.Index != 0 || len(empty.Intentions.Intentions) != 0 {
		t.Fatalf("empty snapshot = %+v", empty)
	}

	if err := s.PutAlloc(ctx, "n2", "a2", regs("n2", "a2", "db")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "web", "web-sidecar-proxy")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Intentions().Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false); err != nil {
		t.Fatal(err)
	}
	old := newRoot(t, "r1", false)
	old.RotatedOutAt = testNow
	cas := &ca.StoredState{ClusterID: "0d9c", Index: 3, Roots: []ca.StoredRoot{old, newRoot(t, "r2", true)}}
	if err := s.CAStorage().Save(ctx, nil, cas); err != nil {
		t.Fatal(err)
	}
	// Keys that are not the mesh's are left out.
	if _, err := c.Put(ctx, prefix+"zzz/other", "x"); err != nil {
		t.Fatal(err)
	}
	b, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev := currentRev(t, c); !b.Reset || b.Revision != rev {
		t.Fatalf("snapshot reset=%v at revision %d, want the current %d", b.Reset, b.Revision, rev)
	}
	want := []AllocRegs{
		{NodeID: "n1", AllocID: "a1", Instances: regs("n1", "a1", "web", "web-sidecar-proxy")},
		{NodeID: "n2", AllocID: "a2", Instances: regs("n2", "a2", "db")},
	}
	if !reflect.DeepEqual(b.Allocs, want) {
		t.Fatalf("snapshot allocs = %+v\nwant %+v", b.Allocs, want)
	}
	if b.Intentions == nil || b.Intentions.Index != 2 || len(b.Intentions.Intentions) != 1 {
		t.Fatalf("snapshot intentions = %+v", b.Intentions)
	}
	wantRoots := &ca.Roots{ActiveRootID: "r2", TrustDomain: "0d9c.meshlet", Roots: []ca.Root{cas.Roots[0].Root, cas.Roots[1].Root}}
	if !reflect.DeepEqual(b.Roots, wantRoots) {
		t.Fatalf("snapshot roots = %+v\nwant %+v", b.Roots, wantRoots)
	}
	noKeys(t, b)
}

// follower runs Follow in the background and hands its batches over.
type follower struct {
	batches chan Batch
	done    chan struct{} // closed when Follow returned err
	err     error
}

func follow(t *testing.T, s *Store, hook func(Batch)) *follower {
	t.Helper()
	return followWith(t, s.Follow, hook)
}

// followWith is follow with Follow or FollowFeed.
func followWith(t *testing.T, feed func(context.Context, func(Batch) error) error, hook func(Batch)) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{batches: make(chan Batch, 100), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.err = feed(ctx, func(b Batch) error {
			if hook != nil {
				hook(b)
			}
			f.batches <- b
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
		if !errors.Is(f.err, context.Canceled) {
			t.Errorf("Follow ended with %v, want context.Canceled", f.err)
		}
	})
	return f
}

func (f *follower) next(t *testing.T) Batch {
	t.Helper()
	select {
	case b := <-f.batches:
		noKeys(t, b)
		return b
	case <-f.done:
		t.Fatalf("Follow ended: %v", f.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10s")
	}
	return Batch{}
}

// none checks that no batch arrives for a moment.
func (f *follower) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-f.batches:
		t.Fatalf("unexpected batch %+v", b)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestFollow(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if err := s.PutAlloc(ctx, "n1", "a0", regs("n1", "a0", "web")); err != nil {
		t.Fatal(err)
	}
	f := follow(t, s, nil)
	reset := f.next(t)
	if !reset.Reset || len(reset.Allocs) != 1 || reset.Intentions == nil || reset.Roots != nil {
		t.Fatalf("first batch = %+v, want the reset", reset)
	}
	last := reset.Revision
	step := func(what string, check func(b Batch) bool) Batch {
		t.Helper()
		b := f.next(t)
		if b.Reset || b.Revision <= last || !check(b) {
			t.Fatalf("%s: batch = %+v (previous revision %d)", what, b, last)
		}
		last = b.Revision
		return b
	}

	if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "db")); err != nil {
		t.Fatal(err)
	}
	step("put", func(b Batch) bool {
		return reflect.DeepEqual(b.Allocs, []AllocRegs{{NodeID: "n1", AllocID: "a1", Instances: regs("n1", "a1", "db")}}) &&
			b.Intentions == nil && b.Roots == nil && b.Revision == currentRev(t, c)
	})
	if _, _, err := s.Intentions().Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false); err != nil {
		t.Fatal(err)
	}
	step("intention", func(b Batch) bool {
		return len(b.Allocs) == 0 && b.Roots == nil && b.Intentions != nil && b.Intentions.Index == 2 && len(b.Intentions.Intentions) == 1
	})
	if err := s.CAStorage().Save(ctx, nil, &ca.StoredState{ClusterID: "c9", Index: 1, Roots: []ca.StoredRoot{newRoot(t, "r1", true)}}); err != nil {
		t.Fatal(err)
	}
	step("roots", func(b Batch) bool {
		return len(b.Allocs) == 0 && b.Intentions == nil && b.Roots != nil && b.Roots.ActiveRootID == "r1" && b.Roots.TrustDomain == "c9.meshlet"
	})
	// A change of key material alone makes no batch.
	if _, err := c.Put(ctx, prefix+"ca/keys/r1", "-----BEGIN EC PRIVATE KEY-----\nnew\n-----END EC PRIVATE KEY-----\n"); err != nil {
		t.Fatal(err)
	}
	f.none(t)
	// One transaction (one watch response) is one batch.
	if _, err := c.Txn(ctx).Then(clientv3.OpDelete(prefix+"catalog/n1/a0"), clientv3.OpPut(prefix+"catalog/n2/a2", mustJSON(t, regs("n2", "a2", "api")))).Commit(); err != nil {
		t.Fatal(err)
	}
	step("txn", func(b Batch) bool {
		return reflect.DeepEqual(b.Allocs, []AllocRegs{{NodeID: "n1", AllocID: "a0"}, {NodeID: "n2", AllocID: "a2", Instances: regs("n2", "a2", "api")}})
	})
	if err := s.DeleteAlloc(ctx, "n1", "a1"); err != nil {
		t.Fatal(err)
	}
	step("delete", func(b Batch) bool {
		return len(b.Allocs) == 1 && b.Allocs[0].AllocID == "a1" && b.Allocs[0].Instances == nil
	})
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFollowReturnsFnError(t *testing.T) {
	s := openTest(t, newClient(t), testPrefix(t))
	boom := errors.New("boom")
	err := s.Follow(ctxT(t, 10*time.Second), func(Batch) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Follow = %v, want fn's error", err)
	}
}

// TestFollowRecoversAfterCompaction: while the follower is behind (its
// fn still busy with the reset), the history it needs is compacted; it
// starts again with a new reset holding the current state, then follows
// changes as before.
func TestFollowRecoversAfterCompaction(t *testing.T) {
	for _, feed := range []string{"Follow", "FollowFeed"} {
		t.Run(feed, func(t *testing.T) { testFollowRecoversAfterCompaction(t, feed == "FollowFeed") })
	}
}

func testFollowRecoversAfterCompaction(t *testing.T, relayed bool) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	feed := s.Follow
	if relayed {
		feed = s.FollowFeed
	}
	ctx := ctxT(t, 20*time.Second)
	if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "web")); err != nil {
		t.Fatal(err)
	}
	inReset, release := make(chan struct{}), make(chan struct{})
	first := true
	f := followWith(t, feed, func(b Batch) {
		if first {
			first = false
			close(inReset)
			<-release
		}
	})
	<-inReset
	if err := s.PutAlloc(ctx, "n1", "a2", regs("n1", "a2", "db")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAlloc(ctx, "n1", "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, currentRev(t, c), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	close(release)
	if b := f.next(t); !b.Reset || len(b.Allocs) != 1 || b.Allocs[0].AllocID != "a1" {
		t.Fatalf("first batch = %+v, want the first reset", b)
	}
	b := f.next(t)
	if !b.Reset || b.Revision != currentRev(t, c) || len(b.Allocs) != 1 || b.Allocs[0].AllocID != "a2" {
		t.Fatalf("batch after the compaction = %+v, want a reset with a2 only", b)
	}
	if err := s.PutAlloc(ctx, "n1", "a3", regs("n1", "a3", "api")); err != nil {
		t.Fatal(err)
	}
	if b := f.next(t); b.Reset || len(b.Allocs) != 1 || b.Allocs[0].AllocID != "a3" {
		t.Fatalf("batch after the recovery = %+v", b)
	}
}

// TestFollowEndsWhenClientCloses: a closed client ends Follow with an
// error instead of retrying forever.
func TestFollowEndsWhenClientCloses(t *testing.T) {
	c := newClient(t)
	s := openTest(t, c, testPrefix(t))
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(context.Background(), func(b Batch) error {
			if b.Reset {
				go func() { _ = c.Close() }()
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "etcd client closed") {
			t.Fatalf("Follow = %v, want an error saying the client closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow still runs 10s after its client closed")
	}
}

// TestFollowSurvivesCorruptValues: an undecodable intentions or ca/roots
// value is left out of the feed (mirrors keep their last good one) and
// the catalog changes keep arriving, in the reset and in the watch.
func TestFollowSurvivesCorruptValues(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if err := s.PutAlloc(ctx, "n1", "a0", regs("n1", "a0", "web")); err != nil {
		t.Fatal(err)
	}
	corruptIx := `{"Intentions":[{"Action":"maybe"}]}`
	if _, err := c.Put(ctx, prefix+intentionsKey, corruptIx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, prefix+caRootsKey, `{"ClusterID":`); err != nil {
		t.Fatal(err)
	}
	f := follow(t, s, nil)
	reset := f.next(t)
	if !reset.Reset || len(reset.Allocs) != 1 || reset.Intentions != nil || reset.Roots != nil {
		t.Fatalf("reset over corrupt values = %+v, want the allocation only", reset)
	}
	if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "db")); err != nil {
		t.Fatal(err)
	}
	if b := f.next(t); b.Reset || len(b.Allocs) != 1 || b.Allocs[0].AllocID != "a1" {
		t.Fatalf("catalog change after the reset = %+v", b)
	}
	// A corrupt value in a watch response: the rest of it still arrives.
	if _, err := c.Txn(ctx).Then(clientv3.OpPut(prefix+intentionsKey, corruptIx+" "),
		clientv3.OpPut(prefix+"catalog/n2/a2", mustJSON(t, regs("n2", "a2", "api")))).Commit(); err != nil {
		t.Fatal(err)
	}
	if b := f.next(t); b.Reset || len(b.Allocs) != 1 || b.Allocs[0].AllocID != "a2" || b.Intentions != nil {
		t.Fatalf("batch with a corrupt intentions value = %+v, want the allocation only", b)
	}
	// Repaired values arrive as usual.
	good, err := intention.EncodeState(intention.State{Index: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, prefix+intentionsKey, string(good)); err != nil {
		t.Fatal(err)
	}
	if b := f.next(t); b.Reset || b.Intentions == nil || b.Intentions.Index != 7 {
		t.Fatalf("batch with the repaired intentions = %+v", b)
	}
}
