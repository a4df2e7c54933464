package ca

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestRemoteLeafPromptAfterLateRoots: the server rotates and signs the
// client's renewals with the new root before the client has the new
// roots; those leaves are refused (ErrUntrusted) and the renewal backs
// off. SetRoots then brings the new root: the leaf is re-issued at once,
// not after the pending backoff.
func TestRemoteLeafPromptAfterLateRoots(t *testing.T) {
	ctx := context.Background()
	server := newTestManager(t, Config{LeafTTL: time.Second})
	var webCalls atomic.Int32
	signer := signerFunc(func(ctx context.Context, svc, csr string) (SignedCert, error) {
		if svc == "web" {
			webCalls.Add(1)
		}
		return server.SignCSR(ctx, svc, csr)
	})
	remote := newTestManager(t, Config{Signer: signer, LeafTTL: time.Second})
	remote.randFloat = func() float64 { return 0 } // renew at 60% of the life
	remote.remoteStaleRetry = 50 * time.Millisecond
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	mustLeaf(t, remote, "web")
	if err := server.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Leaf(ctx, "api"); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("leaf signed by a root the client does not know yet: %v, want ErrUntrusted", err)
	}
	// Renewals at 0.6 s, then after backoffs of 1 s and 2 s: the next
	// backoff is 4 s.
	testutil.WaitFor(t, 10*time.Second, "three refused renewals", func() bool { return webCalls.Load() >= 4 })
	start := time.Now()
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	newSigner := activeSigner(server)
	// Watch the cache: a Leaf call would issue the (expired) leaf itself.
	testutil.WaitFor(t, 10*time.Second, "leaf re-issued under the new root", func() bool {
		l := cachedLeaf(remote, "web")
		return l != nil && signerOf(t, l) == newSigner
	})
	if d := time.Since(start); d > time.Second {
		t.Fatalf("leaf re-issued %s after SetRoots; want at once", d)
	}
}

// TestRemoteAsksAgainAfterStaleServer: a server that has not seen the
// rotation yet signs with the old root; the client keeps that leaf (it
// trusts the old root) but asks again after remoteStaleRetry, until a
// server signs with the active root.
func TestRemoteAsksAgainAfterStaleServer(t *testing.T) {
	ctx := context.Background()
	st := &casStorage{}
	fresh := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour})
	stale := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour})
	oldSigner := activeSigner(stale)
	if err := fresh.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	var useFresh atomic.Bool
	var calls atomic.Int32
	signer := signerFunc(func(ctx context.Context, svc, csr string) (SignedCert, error) {
		calls.Add(1)
		if useFresh.Load() {
			return fresh.SignCSR(ctx, svc, csr)
		}
		return stale.SignCSR(ctx, svc, csr)
	})
	remote := newTestManager(t, Config{Signer: signer, LeafTTL: time.Hour})
	remote.remoteStaleRetry = 100 * time.Millisecond
	if err := remote.SetRoots(fresh.Roots()); err != nil {
		t.Fatal(err)
	}
	if l := mustLeaf(t, remote, "web"); signerOf(t, l) != oldSigner {
		t.Fatal("the stale server did not sign with the old root")
	}
	testutil.WaitFor(t, 5*time.Second, "the client asks again", func() bool { return calls.Load() >= 3 })
	if l := mustLeaf(t, remote, "web"); signerOf(t, l) != oldSigner {
		t.Fatal("the old-root leaf was not kept meanwhile")
	}
	useFresh.Store(true)
	newSigner := activeSigner(fresh)
	testutil.WaitFor(t, 5*time.Second, "leaf signed by the active root", func() bool {
		l := cachedLeaf(remote, "web")
		return l != nil && signerOf(t, l) == newSigner
	})
	n := calls.Load()
	time.Sleep(300 * time.Millisecond)
	if calls.Load() != n {
		t.Fatal("the client keeps asking after a leaf of the active root")
	}
}

// cachedLeaf is service's cached leaf (nil if none), without issuing.
func cachedLeaf(m *Manager, service string) *Leaf {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e := m.leaves[service]; e != nil && e.leaf != nil {
		cp := *e.leaf
		return &cp
	}
	return nil
}

// TestRemoteLeafWithClockBehindServers: a client whose clock is behind
// the servers' by more than the one-minute backdating of NotBefore still
// gets its leaves (peers with the servers' time accept them), instead of
// refusing each one as not yet valid and never having a leaf. A leaf
// that has already expired by the client's clock is still refused.
func TestRemoteLeafWithClockBehindServers(t *testing.T) {
	ctx := context.Background()
	server := newTestManager(t, Config{LeafTTL: time.Hour})
	remote := newTestManager(t, Config{Signer: signerFunc(server.SignCSR)})
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	remote.now = func() time.Time { return time.Now().Add(-5 * time.Minute) }
	l, err := remote.Leaf(ctx, "web")
	if err != nil {
		t.Fatalf("Leaf with the client's clock 5 minutes behind: %v", err)
	}
	if _, err := server.VerifyPeer([][]byte{parseLeafChain(t, l)[0].Raw}); err != nil {
		t.Fatalf("the leaf does not verify at the servers' time: %v", err)
	}

	ahead := newTestManager(t, Config{Signer: signerFunc(server.SignCSR)})
	if err := ahead.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	ahead.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := ahead.Leaf(ctx, "web"); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("Leaf already expired by the client's clock = %v, want ErrUntrusted", err)
	}
}
