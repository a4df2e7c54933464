package ca

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/testutil"
)

// forgeLeaf signs a certificate carrying uri with m's active root.
func forgeLeaf(t *testing.T, m *Manager, uri string) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.RLock()
	root := m.activeLocked()
	m.mu.RUnlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "forged"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, &key.PublicKey, root.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// certSource returns the certificate a TLS side presents.
type certSource func() (*tls.Certificate, error)

func liveLeaf(m *Manager, service string) certSource {
	return func() (*tls.Certificate, error) {
		l, err := m.Leaf(context.Background(), service)
		if err != nil {
			return nil, err
		}
		c, err := l.TLSCertificate()
		return &c, err
	}
}

func fixedLeaf(t *testing.T, l *Leaf) certSource {
	c, err := l.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return func() (*tls.Certificate, error) { return &c, nil }
}

// startMTLSServer serves mutual TLS on 127.0.0.1:0 with trust read live
// from m. Each line "whoami" is answered with the signing key ID of the
// client's certificate, every other line is echoed.
func startMTLSServer(t *testing.T, m *Manager, cert certSource) string {
	t.Helper()
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
		ClientAuth:     tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := m.VerifyPeer(raw)
			return err
		},
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveConn(c.(*tls.Conn))
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func serveConn(c *tls.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		reply := "echo:" + line
		if strings.TrimSpace(line) == "whoami" {
			reply = colonHex(c.ConnectionState().PeerCertificates[0].AuthorityKeyId) + "\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

type client struct {
	conn *tls.Conn
	r    *bufio.Reader
}

// dialMTLS connects presenting cert and verifying the server's leaf with
// verify (which also checks that the server is "db").
func dialMTLS(t *testing.T, addr string, cert certSource, verify func([][]byte) (string, error)) *client {
	t.Helper()
	cfg := &tls.Config{
		MinVersion:           tls.VersionTLS13,
		InsecureSkipVerify:   true, // replaced by the SPIFFE verification below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() },
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			svc, err := verify(raw)
			if err == nil && svc != "db" {
				err = fmt.Errorf("server is %q, want db", svc)
			}
			return err
		},
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(&d, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &client{conn: conn, r: bufio.NewReader(conn)}
}

func (c *client) roundTrip(t *testing.T, line string) string {
	t.Helper()
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read reply to %q: %v", line, err)
	}
	return strings.TrimSpace(got)
}

func (c *client) echo(t *testing.T, line string) {
	t.Helper()
	if got := c.roundTrip(t, line); got != "echo:"+line {
		t.Fatalf("echo %q = %q", line, got)
	}
}

func (c *client) serverSigner() string {
	return colonHex(c.conn.ConnectionState().PeerCertificates[0].AuthorityKeyId)
}

func signerOf(t *testing.T, l *Leaf) string {
	return colonHex(parseLeafChain(t, l)[0].AuthorityKeyId)
}

func activeSigner(m *Manager) string {
	r, _ := m.Roots().Active()
	return r.SigningKeyID
}

func TestRotationWithoutDroppedConnections(t *testing.T) {
	m := newTestManager(t, Config{LeafTTL: time.Hour, RootOverlap: time.Hour})
	oldSigner := activeSigner(m)
	oldRoots := m.Roots()
	oldWeb, oldDB := mustLeaf(t, m, "web"), mustLeaf(t, m, "db")

	liveSrv := startMTLSServer(t, m, liveLeaf(m, "db"))
	c1 := dialMTLS(t, liveSrv, fixedLeaf(t, oldWeb), m.VerifyPeer)
	c1.echo(t, "before rotation")
	if c1.serverSigner() != oldSigner {
		t.Fatalf("server leaf not signed by the initial root")
	}

	var rootsChanged atomic.Int32
	defer m.Subscribe(func(ev Event) {
		if ev.Kind == EventRootsChanged {
			rootsChanged.Add(1)
		}
	})()
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	newSigner := activeSigner(m)
	if newSigner == oldSigner || len(m.Roots().Roots) != 2 || rootsChanged.Load() != 1 {
		t.Fatalf("after Rotate: signer %s (old %s), %d roots, %d events", newSigner, oldSigner, len(m.Roots().Roots), rootsChanged.Load())
	}
	c1.echo(t, "right after rotation")

	testutil.WaitFor(t, 20*time.Second, "leaves re-issued under the new root", func() bool {
		return signerOf(t, mustLeaf(t, m, "db")) == newSigner && signerOf(t, mustLeaf(t, m, "web")) == newSigner
	})
	c1.echo(t, "after re-issue")

	// Client still holding the OLD leaf -> server presenting a NEW leaf.
	c2 := dialMTLS(t, liveSrv, fixedLeaf(t, oldWeb), m.VerifyPeer)
	c2.echo(t, "old client, new server")
	if c2.serverSigner() != newSigner || c2.roundTrip(t, "whoami") != oldSigner {
		t.Errorf("c2: server signer %s, client signer %s", c2.serverSigner(), c2.roundTrip(t, "whoami"))
	}

	// Server still holding the OLD leaf <- client presenting a NEW leaf.
	oldSrv := startMTLSServer(t, m, fixedLeaf(t, oldDB))
	c3 := dialMTLS(t, oldSrv, liveLeaf(m, "web"), m.VerifyPeer)
	c3.echo(t, "new client, old server")
	if c3.serverSigner() != oldSigner || c3.roundTrip(t, "whoami") != newSigner {
		t.Errorf("c3: server signer %s, client signer %s", c3.serverSigner(), c3.roundTrip(t, "whoami"))
	}

	// A peer whose trust bundle predates the rotation (xDS not yet
	// propagated) verifies the new leaf through the cross-signed root.
	oldPool, err := oldRoots.CertPool()
	if err != nil {
		t.Fatal(err)
	}
	staleVerify := func(raw [][]byte) (string, error) {
		return verifyWithPool(oldPool, raw)
	}
	c4 := dialMTLS(t, liveSrv, liveLeaf(m, "web"), staleVerify)
	c4.echo(t, "stale trust bundle")

	// Both sides on new leaves.
	c5 := dialMTLS(t, liveSrv, liveLeaf(m, "web"), m.VerifyPeer)
	if c5.serverSigner() != newSigner || c5.roundTrip(t, "whoami") != newSigner {
		t.Errorf("c5: server signer %s, client signer %s; want both %s", c5.serverSigner(), c5.roundTrip(t, "whoami"), newSigner)
	}
	c1.echo(t, "the first connection is still alive")
	if len(m.Roots().Roots) != 2 {
		t.Errorf("old root dropped before the overlap passed")
	}
}

// verifyWithPool checks a chain against pool only (no Manager).
func verifyWithPool(pool *x509.CertPool, raw [][]byte) (string, error) {
	inter := x509.NewCertPool()
	var certs []*x509.Certificate
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return "", err
		}
		certs = append(certs, c)
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter}); err != nil {
		return "", err
	}
	id, err := ParseSpiffeID(certs[0].URIs[0].String())
	return id.Service, err
}

func TestRotationDropsOldRootOnceLeavesReissued(t *testing.T) {
	m := newTestManager(t, Config{LeafTTL: time.Hour, RootOverlap: time.Nanosecond})
	oldSigner := activeSigner(m)
	services := []string{"web", "db", "api"}
	old := map[string]*Leaf{}
	for _, s := range services {
		old[s] = mustLeaf(t, m, s)
	}
	var renewed sync.Map
	defer m.Subscribe(func(ev Event) {
		if ev.Kind == EventLeafRenewed {
			renewed.Store(ev.Service, true)
		}
	})()
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	newSigner := activeSigner(m)
	testutil.WaitFor(t, 20*time.Second, "old root dropped", func() bool {
		return len(m.Roots().Roots) == 1
	})
	roots := m.Roots()
	if roots.Roots[0].SigningKeyID != newSigner || len(roots.Roots[0].IntermediateCertsPEM) != 0 {
		t.Fatalf("remaining root %+v is not the new root without cross-signature", roots.Roots[0])
	}
	for _, s := range services {
		if _, ok := renewed.Load(s); !ok {
			t.Errorf("no EventLeafRenewed for %s", s)
		}
		if got := signerOf(t, mustLeaf(t, m, s)); got != newSigner {
			t.Errorf("%s leaf signed by %s, want %s", s, got, newSigner)
		}
		raw := parseLeafChain(t, old[s])[0].Raw
		if _, err := m.VerifyPeer([][]byte{raw}); !errors.Is(err, ErrUntrusted) {
			t.Errorf("old %s leaf still trusted after the old root was dropped: %v", s, err)
		}
	}
	if oldSigner == newSigner {
		t.Fatal("rotation did not change the signer")
	}
}

func TestRotationPersists(t *testing.T) {
	dir := t.TempDir()
	m1, err := New(Config{Dir: dir}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := m1.Roots()
	_ = m1.Close()

	m2 := newTestManager(t, Config{Dir: dir})
	got := m2.Roots()
	if got.ActiveRootID != want.ActiveRootID || len(got.Roots) != 2 {
		t.Fatalf("after reload: active %s (want %s), %d roots", got.ActiveRootID, want.ActiveRootID, len(got.Roots))
	}
	active, _ := got.Active()
	if len(active.IntermediateCertsPEM) != 1 {
		t.Fatalf("cross-signed certificate not persisted")
	}
	chain := parseLeafChain(t, mustLeaf(t, m2, "web"))
	if len(chain) != 2 {
		t.Fatalf("leaf chain after reload has %d certificates, want leaf + cross-signed root", len(chain))
	}
}
