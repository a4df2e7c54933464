package meshstate

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/etcdembed/etcdtest"
)

// startPair starts a two-member etcd cluster; closing the second member
// leaves the first without a quorum, hence without a leader.
func startPair(t *testing.T) (first, second *etcdembed.Member) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	cfg := func(name string) etcdembed.Config {
		client, err := etcdtest.FreeURL()
		if err != nil {
			t.Fatal(err)
		}
		peer, err := etcdtest.FreeURL()
		if err != nil {
			t.Fatal(err)
		}
		return etcdembed.Config{DataDir: filepath.Join(t.TempDir(), "etcd"), Name: name, ClientURL: client, PeerURL: peer,
			Logger: hclog.NewNullLogger(), Dev: true}
	}
	c1, c2 := cfg("q1"), cfg("q2")
	var err error
	if first, err = etcdembed.Start(ctx, c1); err != nil {
		t.Fatalf("Start(q1): %v", err)
	}
	t.Cleanup(func() { _ = first.Close() })
	if c2.InitialCluster, err = etcdembed.AddMember(ctx, first.Client(), c2.Name, c2.PeerURL); err != nil {
		t.Fatalf("AddMember(q2): %v", err)
	}
	c2.ClusterState = etcdembed.ClusterStateExisting
	if second, err = etcdembed.Start(ctx, c2); err != nil {
		t.Fatalf("Start(q2): %v", err)
	}
	t.Cleanup(func() { _ = second.Close() })
	return first, second
}

// A server relays its feed to client agents: when its etcd member loses
// the cluster (no leader), FollowFeed ends with the failure, so that the
// stream ends and the clients follow another server, instead of waiting
// (as Follow does, for the server's own mirror) while the clients' state
// goes stale behind keepalives.
func TestFollowFeedEndsWhenTheMemberLosesItsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-member etcd cluster")
	}
	first, second := startPair(t)
	st := openTest(t, etcdtest.Client(t, first), testPrefix(t))
	ctx := ctxT(t, 60*time.Second)
	in := catalog.ServiceInstance{ID: "i1", Name: "web", NodeID: "n1", AllocID: "a1"}
	if err := st.PutAlloc(ctx, "n1", "a1", []catalog.ServiceInstance{in}); err != nil {
		t.Fatal(err)
	}

	type result struct{ err error }
	follow := func(f func(context.Context, func(Batch) error) error, batches chan<- Batch) <-chan result {
		done := make(chan result, 1)
		go func() {
			done <- result{f(ctx, func(b Batch) error { batches <- b; return nil })}
		}()
		return done
	}
	feedBatches, mirrorBatches := make(chan Batch, 16), make(chan Batch, 16)
	feedDone := follow(st.FollowFeed, feedBatches)
	mirrorDone := follow(st.Follow, mirrorBatches)
	for _, ch := range []chan Batch{feedBatches, mirrorBatches} {
		select {
		case b := <-ch:
			if !b.Reset || len(b.Allocs) != 1 {
				t.Fatalf("first batch = %+v, want a Reset with one allocation", b)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no Reset batch")
		}
	}

	if err := second.Close(); err != nil {
		t.Fatalf("Close(q2): %v", err)
	}
	select {
	case r := <-feedDone:
		if r.err == nil || errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("FollowFeed ended with %v, want the member's failure", r.err)
		}
		t.Logf("FollowFeed ended: %v", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("FollowFeed still follows a member without a leader after 20s")
	}
	select {
	case r := <-mirrorDone:
		t.Fatalf("Follow ended (%v); it should keep waiting for the member", r.err)
	default:
	}
}
