package sidecar

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"testing"
	"time"
)

// TestVerifyCache: a chain verified against a pool is remembered for that
// pool only, within its validity; another pool (a rotated trust bundle)
// verifies again and can refuse; an entry past its window is not used.
func TestVerifyCache(t *testing.T) {
	ca1, ca2 := newTestCA(t, "root-1"), newTestCA(t, "root-2")
	leaf := ca1.leaf(t, spiffeID("web")).cert
	pool1, pool2 := caPool(ca1), caPool(ca2)
	var c verifyCache

	if err := c.verify(pool1, []*x509.Certificate{leaf}); err != nil {
		t.Fatalf("trusted chain: %v", err)
	}
	key := verifyKey{roots: pool1, chain: sha256.Sum256(leaf.Raw)}
	v, ok := c.m[key]
	if !ok || !v.notAfter.Equal(leaf.NotAfter) {
		t.Fatalf("verified chain not cached with its validity: %+v, %v", v, ok)
	}
	if err := c.verify(pool1, []*x509.Certificate{leaf}); err != nil {
		t.Fatalf("cached chain: %v", err)
	}
	if err := c.verify(pool2, []*x509.Certificate{leaf}); err == nil {
		t.Fatal("a chain verified against the old roots passed against new roots that do not trust it")
	}

	// An entry whose window has passed is verified again (here: refused).
	stale := verifyKey{roots: pool2, chain: key.chain}
	c.m[stale] = validity{notBefore: time.Now().Add(-2 * time.Hour), notAfter: time.Now().Add(-time.Hour)}
	if err := c.verify(pool2, []*x509.Certificate{leaf}); err == nil {
		t.Fatal("an expired cache entry was used")
	}
}

// TestVerifyPeerCachedStillChecksSAN: the SAN matchers apply to a cached
// chain too.
func TestVerifyPeerCachedStillChecksSAN(t *testing.T) {
	ca := newTestCA(t, "root-1")
	leaf := ca.leaf(t, spiffeID("web")).cert
	s := &secretStore{}
	exact := spiffeID("web")
	other := spiffeID("db")
	ok := &validationSource{roots: caPool(ca), sans: []sanMatcher{{kind: sanURI, m: stringMatcher{exact: &exact}}}}
	if err := s.verifyPeer(ok, []*x509.Certificate{leaf}); err != nil {
		t.Fatalf("first verification: %v", err)
	}
	bad := &validationSource{roots: ok.roots, sans: []sanMatcher{{kind: sanURI, m: stringMatcher{exact: &other}}}}
	if err := s.verifyPeer(bad, []*x509.Certificate{leaf}); !errors.Is(err, ErrPeerSANMismatch) {
		t.Fatalf("cached chain with a SAN that no longer matches: %v, want ErrPeerSANMismatch", err)
	}
}
