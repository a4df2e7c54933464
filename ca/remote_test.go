package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

type signerFunc func(ctx context.Context, service, csrPEM string) (SignedCert, error)

func (f signerFunc) SignCSR(ctx context.Context, service, csrPEM string) (SignedCert, error) {
	return f(ctx, service, csrPEM)
}

// recordingSigner forwards to a server Manager's SignCSR and keeps what
// crossed the wire both ways.
type recordingSigner struct {
	server *Manager
	mu     sync.Mutex
	sent   []string // CSRs
	got    []string // chains
}

func (s *recordingSigner) SignCSR(ctx context.Context, service, csrPEM string) (SignedCert, error) {
	sc, err := s.server.SignCSR(ctx, service, csrPEM)
	s.mu.Lock()
	s.sent = append(s.sent, service+"\n"+csrPEM)
	s.got = append(s.got, sc.CertChainPEM+sc.RootID)
	s.mu.Unlock()
	return sc, err
}

func csrFor(t *testing.T, key crypto.Signer, uris ...string) string {
	t.Helper()
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func TestRemoteModeBeforeRoots(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int32
	remote := newTestManager(t, Config{Signer: signerFunc(func(context.Context, string, string) (SignedCert, error) {
		calls.Add(1)
		return SignedCert{}, errors.New("not reached")
	})})
	if _, err := remote.Leaf(ctx, "web"); !errors.Is(err, ErrNoRoots) {
		t.Fatalf("Leaf before SetRoots = %v, want ErrNoRoots", err)
	}
	if remote.TrustDomain() != "" || remote.ClusterID() != "" {
		t.Fatalf("trust domain %q, cluster ID %q before SetRoots", remote.TrustDomain(), remote.ClusterID())
	}
	if err := remote.Rotate(ctx); !errors.Is(err, ErrRemote) {
		t.Fatalf("Rotate = %v, want ErrRemote", err)
	}
	if _, err := remote.SignCSR(ctx, "web", ""); !errors.Is(err, ErrRemote) {
		t.Fatalf("SignCSR = %v, want ErrRemote", err)
	}
	if err := remote.Reload(ctx); !errors.Is(err, ErrRemote) {
		t.Fatalf("Reload = %v, want ErrRemote", err)
	}
	server := newTestManager(t, Config{})
	raw := parseLeafChain(t, mustLeaf(t, server, "db"))[0].Raw
	if _, err := remote.VerifyPeer([][]byte{raw}); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("VerifyPeer without roots = %v, want ErrUntrusted", err)
	}
	if calls.Load() != 0 {
		t.Fatal("the signer was called without roots")
	}
	if err := server.SetRoots(server.Roots()); err == nil {
		t.Fatal("SetRoots on a key-holding CA succeeded")
	}
	bad := server.Roots()
	bad.Roots[0].Active = false
	if err := remote.SetRoots(bad); err == nil {
		t.Fatal("SetRoots without an active root succeeded")
	}
	bad = server.Roots()
	bad.Roots[0].RootCertPEM = "garbage"
	if err := remote.SetRoots(bad); err == nil {
		t.Fatal("SetRoots with an unparsable root succeeded")
	}
}

// TestRemoteLeafFromServer: a client CA gets its leaf signed by a server
// CA from a CSR, across a root rotation.
func TestRemoteLeafFromServer(t *testing.T) {
	ctx := context.Background()
	server := newTestManager(t, Config{LeafTTL: time.Hour})
	signer := &recordingSigner{server: server}
	remote := newTestManager(t, Config{Signer: signer, LeafTTL: time.Hour})
	var rootsChanged atomic.Int32
	defer remote.Subscribe(func(ev Event) {
		if ev.Kind == EventRootsChanged {
			rootsChanged.Add(1)
		}
	})()
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	if remote.TrustDomain() != server.TrustDomain() || remote.ClusterID() != server.ClusterID() || rootsChanged.Load() != 1 {
		t.Fatalf("after SetRoots: %q %q, %d events", remote.TrustDomain(), remote.ClusterID(), rootsChanged.Load())
	}
	if err := remote.SetRoots(server.Roots()); err != nil || rootsChanged.Load() != 1 {
		t.Fatalf("unchanged SetRoots = %v, %d events", err, rootsChanged.Load())
	}
	issuedBefore := counterValue(t, server.metrics.issued)
	web := mustLeaf(t, remote, "web")
	if counterValue(t, server.metrics.issued) != issuedBefore+1 {
		t.Fatal("SignCSR not counted as issued")
	}
	chain := parseLeafChain(t, web) // also checks the key matches the certificate
	if svc, err := server.VerifyPeer([][]byte{chain[0].Raw}); err != nil || svc != "web" {
		t.Fatalf("server.VerifyPeer(remote leaf) = %q, %v", svc, err)
	}
	// Real mutual TLS: the remote's leaf against the server's.
	addr := startMTLSServer(t, server, liveLeaf(server, "db"))
	dialMTLS(t, addr, liveLeaf(remote, "web"), remote.VerifyPeer).echo(t, "hello")
	assertOnlyCSRsSent(t, signer, web)

	// Rotation: the server rotates, the remote hears the new roots and
	// re-issues under the new root; an old-root peer still verifies it.
	oldPool, _ := server.Roots().CertPool()
	oldPeer := parseLeafChain(t, mustLeaf(t, server, "db"))
	if err := server.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := remote.SetRoots(server.Roots()); err != nil {
		t.Fatal(err)
	}
	newSigner := activeSigner(server)
	testutil.WaitFor(t, 10*time.Second, "remote leaf re-issued under the new root", func() bool {
		l, err := remote.Leaf(ctx, "web")
		return err == nil && signerOf(t, l) == newSigner
	})
	newWeb := mustLeaf(t, remote, "web")
	raw := [][]byte{}
	for _, c := range parseLeafChain(t, newWeb) {
		raw = append(raw, c.Raw)
	}
	if len(raw) != 2 {
		t.Fatalf("re-issued chain has %d certificates, want leaf + cross-signed root", len(raw))
	}
	if svc, err := verifyWithPool(oldPool, raw); err != nil || svc != "web" {
		t.Fatalf("old-root peer verifying the new leaf = %q, %v", svc, err)
	}
	if svc, err := server.VerifyPeer(raw); err != nil || svc != "web" {
		t.Fatalf("server.VerifyPeer(new remote leaf) = %q, %v", svc, err)
	}
	if svc, err := remote.VerifyPeer([][]byte{oldPeer[0].Raw}); err != nil || svc != "db" {
		t.Fatalf("remote.VerifyPeer(old-root peer) = %q, %v", svc, err)
	}
	assertOnlyCSRsSent(t, signer, newWeb)
}

// assertOnlyCSRsSent: every request the signer saw is a service name and
// one CSR, and no private key crossed either way.
func assertOnlyCSRsSent(t *testing.T, s *recordingSigner, leaf *Leaf) {
	t.Helper()
	key, _ := pem.Decode([]byte(leaf.PrivateKeyPEM))
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sent) == 0 {
		t.Fatal("nothing was sent to the signer")
	}
	for i, req := range s.sent {
		_, csrPEM, _ := strings.Cut(req, "\n")
		block, rest := pem.Decode([]byte(csrPEM))
		if block == nil || block.Type != "CERTIFICATE REQUEST" || strings.TrimSpace(string(rest)) != "" {
			t.Fatalf("request %d is not exactly one CSR: %q", i, req)
		}
		if _, err := x509.ParseCertificateRequest(block.Bytes); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		for _, msg := range []string{req, s.got[i]} {
			if strings.Contains(msg, "PRIVATE KEY") || strings.Contains(msg, string(pem.EncodeToMemory(key))) {
				t.Fatalf("a private key crossed the signer: %q", msg)
			}
		}
	}
}

func TestRemoteRejectsBadAnswers(t *testing.T) {
	ctx := context.Background()
	server := newTestManager(t, Config{})
	other := mustLeaf(t, server, "web") // a valid leaf, but for another key
	foreign := newTestManager(t, Config{})
	cases := map[string]signerFunc{
		"other key": func(context.Context, string, string) (SignedCert, error) {
			return SignedCert{CertChainPEM: other.CertPEM}, nil
		},
		"other service": func(_ context.Context, _, csrPEM string) (SignedCert, error) {
			block, _ := pem.Decode([]byte(csrPEM))
			csr, err := x509.ParseCertificateRequest(block.Bytes)
			if err != nil {
				return SignedCert{}, err
			}
			is, err := server.issue("db", csr.PublicKey, nil) // right key, wrong identity
			if err != nil {
				return SignedCert{}, err
			}
			return SignedCert{CertChainPEM: chainPEM(is.chain), RootID: is.rootID}, nil
		},
		"foreign CA": func(_ context.Context, svc, csrPEM string) (SignedCert, error) {
			// The right key and identity, signed by a root nobody trusts.
			block, _ := pem.Decode([]byte(csrPEM))
			csr, err := x509.ParseCertificateRequest(block.Bytes)
			if err != nil {
				return SignedCert{}, err
			}
			foreign.mu.RLock()
			root := foreign.activeLocked()
			foreign.mu.RUnlock()
			tmpl, err := server.leafTemplate(svc, server.TrustDomain(), server.Datacenter(), time.Now(), root.cert.NotAfter)
			if err != nil {
				return SignedCert{}, err
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, csr.PublicKey, root.key)
			if err != nil {
				return SignedCert{}, err
			}
			return SignedCert{CertChainPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}, nil
		},
		"key in answer": func(ctx context.Context, svc, csr string) (SignedCert, error) {
			sc, err := server.SignCSR(ctx, svc, csr)
			sc.CertChainPEM += other.PrivateKeyPEM
			return sc, err
		},
	}
	for name, signer := range cases {
		t.Run(name, func(t *testing.T) {
			remote := newTestManager(t, Config{Signer: signer})
			if err := remote.SetRoots(server.Roots()); err != nil {
				t.Fatal(err)
			}
			if _, err := remote.Leaf(ctx, "web"); !errors.Is(err, ErrUntrusted) {
				t.Fatalf("Leaf with a bad answer = %v, want ErrUntrusted", err)
			}
		})
	}
}

func TestSignCSR(t *testing.T) {
	ctx := context.Background()
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Limiter: lim})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	notCSR := mustLeaf(t, m, "x").CertPEM
	lim.calls.Store(0)

	sc, err := m.SignCSR(ctx, "web", csrFor(t, key)) // no URI SAN: fine
	if err != nil {
		t.Fatal(err)
	}
	chain, err := parseChainPEM(sc.CertChainPEM)
	if err != nil || len(chain) != 1 {
		t.Fatalf("chain: %d certificates, %v", len(chain), err)
	}
	if svc, err := m.VerifyPeer([][]byte{chain[0].Raw}); err != nil || svc != "web" {
		t.Fatalf("VerifyPeer = %q, %v", svc, err)
	}
	if !key.PublicKey.Equal(chain[0].PublicKey) || sc.RootID != m.Roots().ActiveRootID || lim.calls.Load() != 1 {
		t.Fatalf("key kept %v, root %s, limiter calls %d", key.PublicKey.Equal(chain[0].PublicKey), sc.RootID, lim.calls.Load())
	}

	good := csrFor(t, key, m.SpiffeID("web"))
	block, _ := pem.Decode([]byte(good))
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-1] ^= 0xff // the last byte of the signature
	if _, err := x509.ParseCertificateRequest(tampered); err != nil {
		t.Fatalf("test setup: tampered CSR does not parse: %v", err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, csr := range map[string]string{
		"bad signature":  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered})),
		"other service":  csrFor(t, key, m.SpiffeID("db")),
		"foreign domain": csrFor(t, key, "spiffe://0b6f2c8e-0000-4000-8000-000000000001.meshlet/ns/default/dc/dc1/svc/web"),
		"two URI SANs":   csrFor(t, key, m.SpiffeID("web"), m.SpiffeID("web")),
		"RSA key":        csrFor(t, rsaKey, m.SpiffeID("web")),
		"P-384 key":      csrFor(t, p384, m.SpiffeID("web")),
		"not a CSR":      notCSR,
		"garbage":        "garbage",
	} {
		if _, err := m.SignCSR(ctx, "web", csr); !errors.Is(err, ErrInvalidCSR) {
			t.Errorf("%s: SignCSR = %v, want ErrInvalidCSR", name, err)
		}
	}
	if _, err := m.SignCSR(ctx, "web/x", good); !errors.Is(err, ErrInvalidService) {
		t.Errorf("bad service: %v", err)
	}
	if n := lim.calls.Load(); n != 1 {
		t.Errorf("rejected CSRs consulted the limiter: %d calls", n)
	}

	// During a rotation the chain carries the cross-signed new root.
	if err := m.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	sc, err = m.SignCSR(ctx, "web", good)
	if err != nil {
		t.Fatal(err)
	}
	if chain, _ := parseChainPEM(sc.CertChainPEM); len(chain) != 2 || sc.RootID != m.Roots().ActiveRootID {
		t.Fatalf("rotated: %d certificates, root %s", len(chain), sc.RootID)
	}
}

// A CSR may name the service in another datacenter of the trust domain
// (a node group of the same servers): the leaf carries that identity. A
// malformed datacenter or another namespace is refused.
func TestSignCSROtherDatacenter(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, Config{})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	id := SpiffeID{TrustDomain: m.TrustDomain(), Namespace: DefaultNamespace, Datacenter: "dc2", Service: "api"}.URI()
	sc, err := m.SignCSR(ctx, "api", csrFor(t, key, id))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := parseChainPEM(sc.CertChainPEM)
	if err != nil || len(chain) != 1 || len(chain[0].URIs) != 1 || chain[0].URIs[0].String() != id {
		t.Fatalf("leaf URIs = %v (want %s), %v", chain[0].URIs, id, err)
	}
	if svc, err := m.VerifyPeer([][]byte{chain[0].Raw}); err != nil || svc != "api" {
		t.Fatalf("VerifyPeer = %q, %v", svc, err)
	}
	for name, uri := range map[string]string{
		"bad datacenter":  "spiffe://" + m.TrustDomain() + "/ns/default/dc/dc_2!/svc/api",
		"other namespace": "spiffe://" + m.TrustDomain() + "/ns/team/dc/dc2/svc/api",
	} {
		if _, err := m.SignCSR(ctx, "api", csrFor(t, key, uri)); !errors.Is(err, ErrInvalidCSR) {
			t.Errorf("%s: SignCSR = %v, want ErrInvalidCSR", name, err)
		}
	}
}
