package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"slices"
	"testing"
	"time"
)

func leafDNS(t *testing.T, l *Leaf) []string {
	t.Helper()
	return parseLeafChain(t, l)[0].DNSNames
}

// waitLeafDNS waits (bounded) until service's leaf carries want among its
// DNS SANs, or lacks it when absent is set.
func waitLeafDNS(t *testing.T, m *Manager, service, want string, absent bool) *Leaf {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := mustLeaf(t, m, service)
		if slices.Contains(leafDNS(t, l), want) != absent {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaf of %s: DNS SANs %v (want %q present=%v)", service, leafDNS(t, l), want, !absent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSetLeafDNS(t *testing.T) {
	m := newTestManager(t, Config{})
	if _, err := m.SetLeafDNS("gw", []string{"ok.example.com", "bad_name"}); !errors.Is(err, ErrInvalidDNSName) {
		t.Fatalf("invalid name: %v", err)
	}
	if _, err := m.SetLeafDNS("gw", []string{"a.*.example.com"}); !errors.Is(err, ErrInvalidDNSName) {
		t.Fatalf("inner wildcard: %v", err)
	}
	changed, err := m.SetLeafDNS("gw", []string{"*.ingress.consul", "Web.Example.com", "web.example.com"})
	if err != nil || !changed {
		t.Fatalf("SetLeafDNS = %v, %v", changed, err)
	}
	if changed, err = m.SetLeafDNS("gw", []string{"web.example.com", "*.ingress.consul"}); err != nil || changed {
		t.Fatalf("same names again = %v, %v (want unchanged)", changed, err)
	}
	first := mustLeaf(t, m, "gw")
	got := leafDNS(t, first)
	for _, want := range []string{"gw.svc.default." + m.TrustDomain(), "*.ingress.consul", "web.example.com"} {
		if !slices.Contains(got, want) {
			t.Fatalf("DNS SANs %v lack %q", got, want)
		}
	}
	if other := leafDNS(t, mustLeaf(t, m, "web")); len(other) != 1 {
		t.Fatalf("another service's leaf got DNS SANs %v", other)
	}
	// A change re-issues the cached leaf; removing the names too.
	if _, err := m.SetLeafDNS("gw", []string{"api.example.com"}); err != nil {
		t.Fatal(err)
	}
	l := waitLeafDNS(t, m, "gw", "api.example.com", false)
	if l.SerialNumber == first.SerialNumber || slices.Contains(leafDNS(t, l), "web.example.com") {
		t.Fatalf("not re-issued with the new names: %v", leafDNS(t, l))
	}
	if _, err := m.SetLeafDNS("gw", nil); err != nil {
		t.Fatal(err)
	}
	waitLeafDNS(t, m, "gw", "api.example.com", true)
}

// TestRemoteLeafDNS: a remote-mode CA asks for its DNS SANs in the CSR and
// the server signs them; a CSR with a bad DNS name is refused.
func TestRemoteLeafDNS(t *testing.T) {
	server := newTestManager(t, Config{LeafTTL: time.Hour})
	remote := newTestManager(t, Config{Signer: &recordingSigner{server: server}, LeafTTL: time.Hour})
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.SetLeafDNS("gw", []string{"*.ingress.dc1.consul"}); err != nil {
		t.Fatal(err)
	}
	if got := leafDNS(t, mustLeaf(t, remote, "gw")); !slices.Contains(got, "*.ingress.dc1.consul") {
		t.Fatalf("remote leaf DNS SANs %v", got)
	}
	_, csr := csrWithDNS(t, "gw", "bad_name")
	if _, err := server.SignCSR(context.Background(), "gw", csr); !errors.Is(err, ErrInvalidCSR) {
		t.Fatalf("CSR with a bad DNS name: %v", err)
	}
}

func csrWithDNS(t *testing.T, service string, dns ...string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: service}, DNSNames: dns}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// TestLeafDNSDroppedWithTheLeaf: releasing a held leaf forgets its DNS
// SANs, so a later holder of the name does not inherit them.
func TestLeafDNSDroppedWithTheLeaf(t *testing.T) {
	m := newTestManager(t, Config{})
	release, err := m.HoldLeaf("gw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetLeafDNS("gw", []string{"gw.example.com"}); err != nil {
		t.Fatal(err)
	}
	if got := leafDNS(t, mustLeaf(t, m, "gw")); !slices.Contains(got, "gw.example.com") {
		t.Fatalf("DNS SANs %v", got)
	}
	release()
	if got := m.leafDNSFor("gw"); got != nil {
		t.Fatalf("DNS SANs kept after the release: %v", got)
	}
}

// A leaf signed with the names of before a SetLeafDNS (the change came
// while it was being signed) is stored due at once: the renewal loop signs
// it again with the new names instead of waiting for its normal renewal.
func TestLeafSignedWithOldDNSRenewedAtOnce(t *testing.T) {
	m := newTestManager(t, Config{})
	mustLeaf(t, m, "gw")
	m.mu.RLock()
	e := m.leaves["gw"]
	m.mu.RUnlock()
	s, err := m.sign(context.Background(), "gw") // with no extra names
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.leafDNS = map[string][]string{"gw": {"web.example.com"}} // changed meanwhile
	m.mu.Unlock()
	if err := m.store(e, s); err != nil {
		t.Fatal(err)
	}
	m.mu.RLock()
	due := !e.renewAt.After(m.now())
	m.mu.RUnlock()
	if !due {
		t.Errorf("a leaf signed with stale DNS names renews at %v, want now", e.renewAt)
	}
	waitLeafDNS(t, m, "gw", "web.example.com", false)
}
