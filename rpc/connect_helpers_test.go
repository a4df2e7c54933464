package rpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/structs"
)

// fakeConnect is an in-memory ConnectBackend: registrations keyed
// <node>/<alloc>, a feed fanned out to followers, intentions kept with
// intention.State's own rules and CSRs signed by a real in-memory CA
// (ca.Manager: its CSR checks are the servers').
type fakeConnect struct {
	mu        sync.Mutex
	regs      map[string][]catalog.ServiceInstance
	rev       int64
	subs      map[chan meshstate.Batch]bool
	follows   int // Follow calls so far
	following int // Follow calls running
	intents   intention.State
	signed    []string
	ca        *ca.Manager
	rotations int                             // RotateCA calls so far
	rotate    func(ctx context.Context) error // RotateCA's work; nil: none
}

func newFakeConnect(t *testing.T) *fakeConnect {
	t.Helper()
	mgr, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close() })
	return &fakeConnect{regs: map[string][]catalog.ServiceInstance{}, rev: 1, subs: map[chan meshstate.Batch]bool{}, ca: mgr}
}

// caCert is the CA's active root certificate.
func (f *fakeConnect) caCert(t *testing.T) *x509.Certificate {
	t.Helper()
	rs := f.ca.Roots()
	for _, r := range rs.Roots {
		if r.ID != rs.ActiveRootID {
			continue
		}
		block, _ := pem.Decode([]byte(r.RootCertPEM))
		if block == nil {
			t.Fatal("active root has no PEM certificate")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	t.Fatal("no active root")
	return nil
}

func (f *fakeConnect) Follow(ctx context.Context, fn func(meshstate.Batch) error) error {
	ch := make(chan meshstate.Batch, 64)
	f.mu.Lock()
	reset := meshstate.Batch{Revision: f.rev, Reset: true}
	for k, insts := range f.regs {
		node, alloc, _ := strings.Cut(k, "/")
		reset.Allocs = append(reset.Allocs, meshstate.AllocRegs{NodeID: node, AllocID: alloc, Instances: insts})
	}
	f.subs[ch] = true
	f.follows++
	f.following++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.following--
		f.mu.Unlock()
	}()
	if err := fn(reset); err != nil {
		return err
	}
	for {
		select {
		case b := <-ch:
			if err := fn(b); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// set stores (nil: deletes) a registration and publishes the change.
func (f *fakeConnect) set(nodeID, allocID string, insts []catalog.ServiceInstance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if insts == nil {
		delete(f.regs, nodeID+"/"+allocID)
	} else {
		f.regs[nodeID+"/"+allocID] = insts
	}
	f.rev++
	b := meshstate.Batch{Revision: f.rev, Allocs: []meshstate.AllocRegs{{NodeID: nodeID, AllocID: allocID, Instances: insts}}}
	for ch := range f.subs {
		ch <- b
	}
}

func (f *fakeConnect) reg(nodeID, allocID string) ([]catalog.ServiceInstance, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	insts, ok := f.regs[nodeID+"/"+allocID]
	return insts, ok
}

func (f *fakeConnect) followCounts() (follows, following int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.follows, f.following
}

func (f *fakeConnect) NodeRegs(_ context.Context, nodeID string) (map[string][]catalog.ServiceInstance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]catalog.ServiceInstance{}
	for k, insts := range f.regs {
		if node, alloc, ok := strings.Cut(k, "/"); ok && node == nodeID {
			out[alloc] = insts
		}
	}
	return out, nil
}

func (f *fakeConnect) PutAlloc(_ context.Context, nodeID, allocID string, insts []catalog.ServiceInstance) error {
	f.set(nodeID, allocID, insts)
	return nil
}

// PutExternal stands for meshstate.Store's: an ID another node's
// instance has is refused.
func (f *fakeConnect) PutExternal(ctx context.Context, inst catalog.ServiceInstance) error {
	f.mu.Lock()
	for _, insts := range f.regs {
		for _, in := range insts {
			if in.ID == inst.ID && in.NodeID != inst.NodeID {
				f.mu.Unlock()
				return fmt.Errorf("%w: service ID %q is registered on node %q", catalog.ErrIDTaken, inst.ID, in.NodeID)
			}
		}
	}
	f.mu.Unlock()
	return f.PutAlloc(ctx, inst.NodeID, inst.AllocID, []catalog.ServiceInstance{inst})
}

func (f *fakeConnect) DeleteAlloc(_ context.Context, nodeID, allocID string) error {
	f.set(nodeID, allocID, nil)
	return nil
}

func (f *fakeConnect) SignCSR(ctx context.Context, service, csrPEM string) (ca.SignedCert, error) {
	sc, err := f.ca.SignCSR(ctx, service, csrPEM)
	if err != nil {
		return ca.SignedCert{}, err
	}
	f.mu.Lock()
	f.signed = append(f.signed, service)
	f.mu.Unlock()
	return sc, nil
}

func (f *fakeConnect) Intentions() intention.Writer { return fakeIntentions{f} }

func (f *fakeConnect) LoadIntentions(context.Context) (intention.State, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.intents, f.intents.Index > 0, nil
}

func (f *fakeConnect) Roots(context.Context) (ca.Roots, error) { return f.ca.Roots(), nil }

func (f *fakeConnect) RotateCA(ctx context.Context) error {
	f.mu.Lock()
	f.rotations++
	rotate := f.rotate
	f.mu.Unlock()
	if rotate == nil {
		return nil
	}
	return rotate(ctx)
}

type fakeIntentions struct{ f *fakeConnect }

func (w fakeIntentions) write(op func(intention.State) (intention.State, intention.Intention, error)) (intention.Intention, uint64, error) {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	st, in, err := op(w.f.intents)
	if err != nil {
		return intention.Intention{}, 0, err
	}
	w.f.intents = st
	return in, st.Index, nil
}

func (w fakeIntentions) Upsert(_ context.Context, in intention.Intention, replace bool) (intention.Intention, uint64, error) {
	return w.write(func(st intention.State) (intention.State, intention.Intention, error) {
		return st.Upsert(in, replace, time.Now())
	})
}

func (w fakeIntentions) Delete(_ context.Context, src, dst string) (intention.Intention, uint64, error) {
	return w.write(func(st intention.State) (intention.State, intention.Intention, error) { return st.Delete(src, dst) })
}

func (w fakeIntentions) DeleteByID(_ context.Context, id string, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.write(func(st intention.State) (intention.State, intention.Intention, error) { return st.DeleteByID(id, pre) })
}

func (w fakeIntentions) UpdateByID(_ context.Context, id string, in intention.Intention, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.write(func(st intention.State) (intention.State, intention.Intention, error) {
		return st.UpdateByID(id, in, time.Now(), pre)
	})
}

// startConnectServer serves b and cb on ln (127.0.0.1:0 when nil) with
// the feed's keepalive shortened; the server is closed at the end.
func startConnectServer(t *testing.T, b Backend, cb ConnectBackend, srvTLS, dial *tls.Config, ln net.Listener) (*Server, string) {
	t.Helper()
	s, err := NewServer(ServerConfig{Backend: b, Connect: cb, TLS: srvTLS, DialTLS: dial, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	s.feedKeepalive = 100 * time.Millisecond
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// meshFixture is one TLS server with the connect calls and node-1
// registered with secret s1.
type meshFixture struct {
	p    *pki
	b    *fakeBackend
	f    *fakeConnect
	s    *Server
	addr string
	c    *Client
}

func newMeshFixture(t *testing.T) *meshFixture {
	t.Helper()
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	m := &meshFixture{p: p, b: newFakeBackend(), f: newFakeConnect(t)}
	m.s, m.addr = startConnectServer(t, m.b, m.f, srvTLS, dial, nil)
	m.c = newTestClient(t, []string{m.addr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	if err := m.c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	return m
}

// follower runs FollowConnect and hands the batches fn sees to a channel.
type follower struct {
	batches chan meshstate.Batch
	done    chan struct{} // closed when FollowConnect returned err
	err     error
	cancel  context.CancelFunc
}

func follow(t *testing.T, c *Client) *follower {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	fl := &follower{batches: make(chan meshstate.Batch, 64), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(fl.done)
		fl.err = c.FollowConnect(ctx, func(b meshstate.Batch) error {
			fl.batches <- b
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-fl.done:
		case <-time.After(5 * time.Second):
			t.Error("FollowConnect did not return after its context ended")
		}
	})
	return fl
}

func (fl *follower) next(t *testing.T, within time.Duration) meshstate.Batch {
	t.Helper()
	select {
	case b := <-fl.batches:
		return b
	case <-time.After(within):
		t.Fatalf("no batch within %v", within)
		return meshstate.Batch{}
	}
}

func inst(node, alloc, name string) catalog.ServiceInstance {
	return catalog.ServiceInstance{ID: connect.ServiceID(alloc, "g", name, "http"), Name: name, NodeID: node, AllocID: alloc, Address: "10.0.0.1", Port: 8080}
}

// proxyInst is the sidecar proxy instance of service dest, as
// connect.Registrations makes it.
func proxyInst(node, alloc, dest string) catalog.ServiceInstance {
	in := inst(node, alloc, connect.ProxyServiceName(dest))
	in.ID = connect.ProxyID(connect.ServiceID(alloc, "g", dest, "http"))
	in.Kind = catalog.KindConnectProxy
	in.Proxy = &catalog.Proxy{DestinationServiceName: dest, DestinationServiceID: connect.ServiceID(alloc, "g", dest, "http"), LocalServicePort: 8080}
	return in
}

// makeCSR returns a PEM CSR, naming uri as its URI SAN when set, and the
// key's public half.
func makeCSR(t *testing.T, uri string) (string, any) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), &key.PublicKey
}

// rsaCSR is a PEM CSR with an RSA key (the CA signs only ECDSA P-256).
func rsaCSR(t *testing.T) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// multiURICSR is a PEM CSR naming every uri as a URI SAN.
func multiURICSR(t *testing.T, uris ...string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// rawStatus sends one call with the given node credentials and returns the status.
func rawStatus(t *testing.T, m *meshFixture, method, path, body, secret string) int {
	t.Helper()
	dial, err := dialTLS(m.p.clientTLS(tlsutil.RoleClient, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(dial)
	defer tr.CloseIdleConnections()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 5*time.Second), method, "https://"+m.addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderNodeID, "node-1")
	req.Header.Set(HeaderNodeSecret, secret)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func wantNot(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if errors.Is(err, target) {
			t.Fatalf("%s: err = %v, must not be %v", what, err, target)
		}
	}
}
