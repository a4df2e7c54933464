package xds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshlet/meshlet/ca"
)

// testCA is a tiny real CA (ECDSA P-256, SPIFFE URI SANs) implementing
// CertSource for tests.
type testCA struct {
	t        testing.TB
	td, dc   string
	mu       sync.Mutex
	rootKey  *ecdsa.PrivateKey
	rootCert *x509.Certificate
	rootPEM  string
	rootN    int
	serial   int64
	leaves   map[string]*ca.Leaf
	leafErr  map[string]error
	calls    map[string]int
	holds    map[string]int
	subs     map[int]func(ca.Event)
	nextSub  int
}

func newTestCA(t testing.TB) *testCA {
	c := &testCA{t: t, td: "11111111-2222-3333-4444-555555555555.meshlet", dc: "dc1",
		leaves: map[string]*ca.Leaf{}, leafErr: map[string]error{}, calls: map[string]int{}, holds: map[string]int{}, subs: map[int]func(ca.Event){}}
	c.newRoot()
	return c
}

func (c *testCA) newRoot() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatalf("generate root key: %v", err)
	}
	c.rootN++
	c.serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(c.serial),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("meshlet test root %d", c.rootN)},
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: c.td}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		c.t.Fatalf("sign root: %v", err)
	}
	cert, _ := x509.ParseCertificate(der)
	c.rootKey, c.rootCert = key, cert
	c.rootPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func (c *testCA) sign(service string) *ca.Leaf {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatalf("generate leaf key: %v", err)
	}
	c.serial++
	id := SpiffeID(c.td, c.dc, service)
	u, _ := url.Parse(id)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial),
		Subject:      pkix.Name{CommonName: service},
		URIs:         []*url.URL{u},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(72 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.rootCert, &key.PublicKey, c.rootKey)
	if err != nil {
		c.t.Fatalf("sign leaf: %v", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		c.t.Fatalf("marshal key: %v", err)
	}
	return &ca.Leaf{
		Service: service, SpiffeID: id, SerialNumber: fmt.Sprint(c.serial),
		CertPEM:       string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		PrivateKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
		ValidAfter:    tmpl.NotBefore, ValidBefore: tmpl.NotAfter,
	}
}

func (c *testCA) TrustDomain() string { return c.td }

func (c *testCA) Roots() ca.Roots {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := fmt.Sprintf("root-%d", c.rootN)
	return ca.Roots{ActiveRootID: id, TrustDomain: c.td, Roots: []ca.Root{{ID: id, RootCertPEM: c.rootPEM, Active: true}}}
}

func (c *testCA) Leaf(_ context.Context, service string) (*ca.Leaf, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[service]++
	if err := c.leafErr[service]; err != nil {
		return nil, err
	}
	l := c.leaves[service]
	if l == nil {
		l = c.sign(service)
		c.leaves[service] = l
	}
	return l, nil
}

func (c *testCA) HoldLeaf(service string) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds[service]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.holds[service]--
			c.mu.Unlock()
		})
	}, nil
}

func (c *testCA) holdCount(service string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[service]
}

func (c *testCA) Subscribe(fn func(ca.Event)) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextSub
	c.nextSub++
	c.subs[id] = fn
	return func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}
}

func (c *testCA) emit(ev ca.Event) {
	c.mu.Lock()
	ids := make([]int, 0, len(c.subs))
	for id := range c.subs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	fns := make([]func(ca.Event), 0, len(ids))
	for _, id := range ids {
		fns = append(fns, c.subs[id])
	}
	c.mu.Unlock()
	for _, fn := range fns {
		fn(ev)
	}
}

// renew re-issues a service's leaf and announces it.
func (c *testCA) renew(service string) *ca.Leaf {
	c.mu.Lock()
	l := c.sign(service)
	c.leaves[service] = l
	c.mu.Unlock()
	c.emit(ca.Event{Kind: ca.EventLeafRenewed, Service: service})
	return l
}

// rotate replaces the root, announces it, then re-issues every leaf.
func (c *testCA) rotate() {
	c.mu.Lock()
	c.newRoot()
	var svcs []string
	for s := range c.leaves {
		svcs = append(svcs, s)
	}
	c.mu.Unlock()
	c.emit(ca.Event{Kind: ca.EventRootsChanged})
	for _, s := range svcs {
		c.renew(s)
	}
}

func (c *testCA) setLeafErr(service string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leafErr[service] = err
}

func (c *testCA) leafCalls(service string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[service]
}

func secretCert(m any) string {
	s, _ := m.(*tlsv3.Secret)
	return s.GetTlsCertificate().GetCertificateChain().GetInlineString()
}

func secretRoots(m any) string {
	s, _ := m.(*tlsv3.Secret)
	return s.GetValidationContext().GetTrustedCa().GetInlineString()
}

// verifyChain checks a leaf PEM against a roots PEM and its SPIFFE ID.
func verifyChain(leafPEM, rootsPEM, spiffe string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(rootsPEM)) {
		return fmt.Errorf("no roots in PEM")
	}
	b, _ := pem.Decode([]byte(leafPEM))
	if b == nil {
		return fmt.Errorf("no leaf in PEM")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return err
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return err
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != spiffe {
		return fmt.Errorf("leaf URI SANs = %v, want %s", cert.URIs, spiffe)
	}
	return nil
}
