package agent

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/internal/testutil"
)

// An agent restart keeps the servers' copy of its allocations' services:
// anti-entropy does not delete the registrations of restored allocations
// (they are live) before their services hook registers them again (the
// key in etcd is never recreated). The unit test of the rule is
// meshstate's TestRegistrarKeepsLiveAllocations; here the hook may win
// the race, so this guards the agent's wiring (allocLive).
func TestRestartKeepsRestoredRegistrations(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.Backend().RegisterJob(ctx, parseJob(t, shJob("keep", loopScript, `service { name = "keep" }`)), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "keep", "running")
	key := DefaultEtcdPrefix + "connect/catalog/" + a.Client().Node().ID + "/" + alloc.ID
	var created int64
	testutil.WaitFor(t, hang, "the registration in etcd", func() bool {
		resp, err := a.etcdMember.Client().Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		created = resp.Kvs[0].CreateRevision
		return true
	})
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}

	b := startAgent(t, dir)
	t.Cleanup(func() {
		stopAndWait(b.Backend(), "keep") // its task outlived the first agent, by design
		_ = b.Shutdown()
	})
	live := allocLive(b.Client())
	if !live(alloc.ID) || live(alloc.ID[:8]) || live("8d8ae1d6-1111-2222-3333-444455556666") {
		t.Fatal("allocLive: want the restored allocation live, a prefix or an unknown one not")
	}
	cli := b.etcdMember.Client()
	deadline := time.Now().Add(2 * time.Second) // the first compare and sync passes
	for time.Now().Before(deadline) {
		resp, err := cli.Get(ctx, key, clientv3.WithRev(0))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created {
			t.Fatalf("the restored allocation's registration was deleted at the restart (now %v)", resp.Kvs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
