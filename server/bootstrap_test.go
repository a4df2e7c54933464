package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/etcdembed"
)

func loopbackURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// With bootstrap_expect 2 a lone member elects no leader; once the
// cluster is marked bootstrapped (it had its servers once) it does, and a
// later start does not wait again.
func TestBootstrapExpectHoldsTheFirstElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := etcdembed.Start(ctx, etcdembed.Config{DataDir: t.TempDir(), Name: "b1", ClientURL: loopbackURL(t),
		PeerURL: loopbackURL(t), Logger: hclog.NewNullLogger(), Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	run := func(expect int, prefix ...string) (won chan struct{}, stop func()) {
		won = make(chan struct{}, 1)
		e := &EtcdLeadership{Client: m.Client(), Prefix: "/bt/", Name: "b1", ID: "id-b1", Addr: "127.0.0.1:1", TTL: 1, Expect: expect}
		if len(prefix) > 0 { // a cluster that already holds state (an upgrade)
			e.Prefix, e.Used = prefix[0], func() bool { return true }
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Run(rctx, func(context.Context, string, int64) {
				select {
				case won <- struct{}{}:
				default:
				}
			}, func() {})
		}()
		return won, func() { rcancel(); <-done }
	}

	won, stop := run(2)
	select {
	case <-won:
		t.Fatal("a lone server of an expected 2 became the leader")
	case <-time.After(3 * time.Second):
	}
	// The second server arrives (its member would make two voters): here
	// the bootstrap is recorded as a server that saw it would.
	if _, err := m.Client().Put(ctx, "/bt/bootstrapped", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("no leader after the cluster was bootstrapped")
	}
	stop()

	won, stop = run(3) // a restart after the bootstrap: no wait, whatever the size
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("a restarted server of a bootstrapped cluster waited for bootstrap_expect again")
	}
	stop()

	// An upgraded cluster that holds state but was never marked (the
	// marker is newer than the cluster) elects at once.
	won, stop = run(3, "/bt-upgraded/")
	defer stop()
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("a cluster holding state waited for bootstrap_expect")
	}
	if resp, err := m.Client().Get(ctx, "/bt-upgraded/bootstrapped"); err != nil || resp.Count != 1 {
		t.Errorf("the used cluster was not marked bootstrapped: %v", err)
	}
}
