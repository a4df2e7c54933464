package rpc

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// A follower forwards writes to the leader (whose backend sees them and
// checks the secret) and serves reads from its own backend.
func TestFollowerForwardsWrites(t *testing.T) {
	p := newPKI(t)
	leaderTLS, leaderDial := p.serverTLSPair("leader")
	followerTLS, followerDial := p.serverTLSPair("follower")
	lb, fb := newFakeBackend(), newFakeBackend()
	_, leaderAddr := startServer(t, lb, leaderTLS, leaderDial)
	fb.setLeader(false, leaderAddr)
	_, followerAddr := startServer(t, fb, followerTLS, followerDial)
	ctx := ctxT(t, 10*time.Second)
	c := newTestClient(t, []string{followerAddr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")

	if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode via follower: %v", err)
	}
	if lb.node("node-1") == nil || fb.node("node-1") != nil {
		t.Fatal("registration did not land on the leader only")
	}
	// The shared store would replicate the node and allocations; the
	// follower's backend gets its own copy, marked to tell reads apart.
	_ = fb.RegisterNode(ctx, lb.node("node-1"))
	lb.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", Name: "on-leader"})
	fb.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", Name: "on-follower"})
	allocs, _, err := c.NodeAllocs(ctx, "node-1", 0)
	if err != nil || len(allocs) != 1 || allocs[0].Name != "on-follower" {
		t.Fatalf("NodeAllocs via follower = %+v, %v; want the follower's own copy", allocs, err)
	}
	if err := c.UpdateAllocs(ctx, []*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}); err != nil {
		t.Fatalf("UpdateAllocs via follower: %v", err)
	}
	if ttl, err := c.Heartbeat(ctx, "node-1"); err != nil || ttl != 10*time.Second {
		t.Fatalf("Heartbeat via follower = %v, %v", ttl, err)
	}
	_, lUpdates, lHeartbeats := lb.counts()
	_, fUpdates, fHeartbeats := fb.counts()
	if lUpdates != 1 || lHeartbeats != 1 || fUpdates != 0 || fHeartbeats != 0 {
		t.Fatalf("leader saw %d updates and %d heartbeats, follower %d and %d; want 1, 1, 0, 0", lUpdates, lHeartbeats, fUpdates, fHeartbeats)
	}
	if got := lb.alloc("a1").ClientStatus; got != structs.AllocClientStatusRunning {
		t.Fatalf("leader's a1 status = %q", got)
	}
	// The leader re-checks the secret of a forwarded call.
	bad := newTestClient(t, []string{followerAddr}, p.clientTLS(tlsutil.RoleClient, "c2"), "node-1", "wrong")
	_, err = bad.Heartbeat(ctx, "node-1")
	wantErr(t, "forwarded heartbeat with the wrong secret", err, ErrForbidden)
	// A CLI certificate is refused by the follower before forwarding.
	cli := newTestClient(t, []string{followerAddr}, p.clientTLS(tlsutil.RoleCLI, "cli"), "node-1", "s1")
	_, err = cli.Heartbeat(ctx, "node-1")
	wantErr(t, "forwarded heartbeat with a cli certificate", err, ErrForbidden)
	if _, _, hbs := lb.counts(); hbs != 1 {
		t.Fatalf("leader saw %d heartbeats, want 1", hbs)
	}
}

// Without a leader a write fails with ErrNoLeader after retrying for the
// call's timeout; when a leader is elected during the call, it succeeds.
func TestNoLeaderRetries(t *testing.T) {
	p := newPKI(t)
	leaderTLS, leaderDial := p.serverTLSPair("leader")
	followerTLS, followerDial := p.serverTLSPair("follower")
	lb, fb := newFakeBackend(), newFakeBackend()
	_, leaderAddr := startServer(t, lb, leaderTLS, leaderDial)
	fb.setLeader(false, "")
	_, followerAddr := startServer(t, fb, followerTLS, followerDial)
	c := newTestClient(t, []string{followerAddr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")

	start := time.Now()
	err := c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"})
	wantErr(t, "register without leader", err, ErrNoLeader)
	if !errors.Is(err, ErrNoServers) || time.Since(start) > 4*time.Second {
		t.Fatalf("err = %v after %v; want ErrNoServers within the 2 s timeout", err, time.Since(start))
	}

	// A leader that cannot be reached is answered as no leader, too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	_ = ln.Close()
	fb.setLeader(false, deadAddr)
	_, err = c.Heartbeat(ctxT(t, 10*time.Second), "node-1")
	wantErr(t, "heartbeat to an unreachable leader", err, ErrNoLeader)

	time.AfterFunc(300*time.Millisecond, func() { fb.setLeader(false, leaderAddr) })
	if err := c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("register during an election: %v", err)
	}
	if lb.node("node-1") == nil {
		t.Fatal("the elected leader did not get the registration")
	}
}

// When the client's server is closed, calls (and a pending long-poll) go
// on through the next server within seconds.
func TestClientFailover(t *testing.T) {
	p := newPKI(t)
	aTLS, aDial := p.serverTLSPair("a")
	bTLS, bDial := p.serverTLSPair("b")
	shared := newFakeBackend() // both servers see one store
	a, aAddr := startServer(t, shared, aTLS, aDial)
	_, bAddr := startServer(t, shared, bTLS, bDial)
	ctx := ctxT(t, 20*time.Second)
	c := newTestClient(t, []string{aAddr, bAddr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	_, idx, err := c.NodeAllocs(ctx, "node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		allocs []*structs.Allocation
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		allocs, _, err := c.NodeAllocs(ctx, "node-1", idx)
		ch <- result{allocs, err}
	}()
	time.Sleep(200 * time.Millisecond) // the long-poll waits on a
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatalf("close a: %v", err)
	}
	shared.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1"})
	select {
	case r := <-ch:
		if r.err != nil || len(r.allocs) != 1 {
			t.Fatalf("long-poll across failover = %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not move to the second server")
	}
	if err := c.UpdateAllocs(ctx, []*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}); err != nil {
		t.Fatalf("UpdateAllocs after failover: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("failover took %v", d)
	}
	if got := c.cfg.Servers[c.preferred.Load()]; got != bAddr {
		t.Fatalf("preferred server %s, want %s", got, bAddr)
	}
}

// Closing the only server ends a pending long-poll promptly with
// ErrNoServers; closing the client ends it with ErrClosed.
func TestCloseEndsLongPoll(t *testing.T) {
	for _, closeServer := range []bool{true, false} {
		b := newFakeBackend()
		s, addr := startServer(t, b, nil, nil)
		c := newTestClient(t, []string{addr}, nil, "node-1", "s1")
		ctx := ctxT(t, 20*time.Second)
		if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
			t.Fatal(err)
		}
		_, idx, err := c.NodeAllocs(ctx, "node-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() {
			_, _, err := c.NodeAllocs(ctx, "node-1", idx)
			ch <- err
		}()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		want := ErrClosed
		if closeServer {
			want = ErrNoServers
			_ = s.Close()
		} else {
			_ = c.Close()
		}
		select {
		case err := <-ch:
			wantErr(t, "pending long-poll", err, want)
		case <-time.After(3 * time.Second):
			t.Fatalf("long-poll still pending 3 s after close (server closed: %v)", closeServer)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("long-poll took %v to end", d)
		}
	}
}
