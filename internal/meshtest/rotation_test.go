package meshtest

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// Test 4: a CA root rotation while a connection streams through both
// sidecars. The CA re-issues every leaf under the new root, the control
// plane pushes them over SDS, and the stream never breaks; afterwards new
// connections work and db presents a leaf issued by the new root, carrying
// the cross-signed certificate so a peer that trusts only the old root
// still verifies it.
func TestRootRotationKeepsConnections(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	db := m.dbs[0]
	oldRoot := activeRoot(t, m.cp)
	long, _ := m.greet(t)
	s := startStreamer(t, long)
	s.progress(t, 20, "before the rotation")

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := m.cp.CA.Rotate(ctx); err != nil {
		t.Fatalf("failed to rotate the CA root: %v", err)
	}
	newRoot := activeRoot(t, m.cp)
	if newRoot.Equal(oldRoot) {
		t.Fatal("the active root did not change")
	}
	if n := len(m.cp.CA.Roots().Roots); n != 2 {
		t.Fatalf("%d trusted roots right after the rotation, want 2 (old and new overlap)", n)
	}
	testutil.WaitFor(t, waitTimeout, "the CA to re-issue web's and db's leaves", func() bool {
		for _, svc := range []string{"web", "db"} {
			leaf, err := m.cp.CA.Leaf(ctx, svc)
			if err != nil || !issuedBy(parsePEM(t, leaf.CertPEM)[0], newRoot) {
				return false
			}
		}
		return true
	})
	s.progress(t, 20, "while leaves are re-issued")
	testutil.WaitFor(t, waitTimeout, "db's sidecar to present a leaf of the new root", func() bool {
		peer, err := presentedChain(m, db.publicAddr())
		return err == nil && issuedBy(peer[0], newRoot)
	})
	testutil.WaitFor(t, waitTimeout, "web's sidecar to apply a leaf of the new root", func() bool {
		return issuedBy(servedLeaf(t, m.web.proxy, "web"), newRoot)
	})
	s.progress(t, 20, "after both sidecars took the new leaves")
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	long.exchange(t, "same connection after the rotation")

	peer, err := presentedChain(m, db.publicAddr())
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyChain(peer, newRoot); err != nil {
		t.Fatalf("db's new leaf does not verify against the new root alone: %v", err)
	}
	if len(peer) != 2 || !issuedBy(peer[1], oldRoot) || string(peer[1].SubjectKeyId) != string(newRoot.SubjectKeyId) {
		t.Fatalf("db presents %d certificates, want the leaf and the new root cross-signed by the old one", len(peer))
	}
	if err := verifyChain(peer, oldRoot); err != nil {
		t.Fatalf("db's new leaf does not verify for a peer that trusts only the old root: %v", err)
	}
	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting on a new connection after the rotation = %q", id)
	}
	c.exchange(t, "new connection after the rotation")
}

// presentedChain handshakes with a public listener as web and returns the
// chain the listener presented.
func presentedChain(m *mesh, addr string) ([]*x509.Certificate, error) {
	tc, err := probeTLS(m.cp, addr, "web")
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	return tc.ConnectionState().PeerCertificates, nil
}

// Leaves with a short TTL are renewed before they expire (Consul #16779:
// connections failing once the first leaves expired): a connection streams
// across several renewals, and once the leaves the sidecars started with
// have expired, new connections still work and db presents a valid leaf.
func TestLeafRenewalOutlivesFirstLeaves(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // the CA's minimum is 1s; renewal at 60-90% of it
	m := newMeshWith(t, 1, ttl)
	db := m.dbs[0]
	first, err := presentedChain(m, db.publicAddr())
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(first[0].NotAfter); life > ttl {
		t.Fatalf("db's leaf lives %s more, want at most the %s TTL", life, ttl)
	}
	webFirst := servedLeaf(t, m.web.proxy, "web")
	long, _ := m.greet(t)
	s := startStreamer(t, long)
	expired := func(c *x509.Certificate) func() bool {
		return func() bool { return time.Now().After(c.NotAfter) }
	}
	testutil.WaitFor(t, waitTimeout, "db's first leaf to expire", expired(first[0]))
	testutil.WaitFor(t, waitTimeout, "web's first leaf to expire", expired(webFirst))
	s.progress(t, 20, "after the first leaves expired")
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting on a new connection after the first leaves expired = %q", id)
	}
	c.exchange(t, "renewed")
	now, err := presentedChain(m, db.publicAddr())
	if err != nil {
		t.Fatal(err)
	}
	if now[0].Equal(first[0]) || !time.Now().Before(now[0].NotAfter) {
		t.Fatalf("db presents serial %v valid until %s, want a renewed, unexpired leaf", now[0].SerialNumber, now[0].NotAfter)
	}
	if err := verifyChain(now, activeRoot(t, m.cp)); err != nil {
		t.Fatalf("db's renewed leaf: %v", err)
	}
}
