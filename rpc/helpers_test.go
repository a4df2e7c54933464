package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// pki is a test CA with certificates written to files, loaded through
// tlsutil as the agent does.
type pki struct {
	t              *testing.T
	dir            string
	caCert, caKey  []byte
	caFile         string
	verifyHostname bool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caCert, caKey, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatalf("generate CA: %v", err)
	}
	dir := t.TempDir()
	p := &pki{t: t, dir: dir, caCert: caCert, caKey: caKey, caFile: filepath.Join(dir, "ca.pem")}
	p.write("ca.pem", caCert)
	return p
}

func (p *pki) write(name string, data []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// config makes a certificate of role and returns its tlsutil.Config.
func (p *pki) config(role, name string) tlsutil.Config {
	p.t.Helper()
	cert, key, err := tlsutil.GenerateCert(p.caCert, p.caKey, tlsutil.CertOptions{Role: role})
	if err != nil {
		p.t.Fatalf("generate %s cert: %v", role, err)
	}
	return tlsutil.Config{CAFile: p.caFile, CertFile: p.write(name+".pem", cert), KeyFile: p.write(name+"-key.pem", key),
		VerifyServerHostname: p.verifyHostname}
}

// serverTLSPair is a server's listener and dialing configurations.
func (p *pki) serverTLSPair(name string) (srv, dial *tls.Config) {
	p.t.Helper()
	c := p.config(tlsutil.RoleServer, name)
	srv, err := c.ServerTLS()
	if err != nil {
		p.t.Fatal(err)
	}
	dial, err = c.ClientTLS()
	if err != nil {
		p.t.Fatal(err)
	}
	return srv, dial
}

func (p *pki) clientTLS(role, name string) *tls.Config {
	p.t.Helper()
	c, err := p.config(role, name).ClientTLS()
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// fakeBackend is an in-memory Backend with a blocking index.
type fakeBackend struct {
	mu         sync.Mutex
	nodes      map[string]*structs.Node
	allocs     map[string]*structs.Allocation
	index      uint64
	changed    chan struct{}
	leader     bool
	leaderAddr string

	registers, updates, heartbeats int
	fetches                        int // NodeAllocs calls
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{nodes: map[string]*structs.Node{}, allocs: map[string]*structs.Allocation{},
		index: 1, changed: make(chan struct{}), leader: true}
}

// bump advances the index and wakes blocked readers; mu is held.
func (b *fakeBackend) bump() {
	b.index++
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *fakeBackend) RegisterNode(_ context.Context, node *structs.Node) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cp := *node
	b.nodes[node.ID] = &cp
	b.registers++
	b.bump()
	return nil
}

func (b *fakeBackend) AllocsOnNode(_ context.Context, nodeID string) ([]*structs.Allocation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*structs.Allocation
	for _, a := range b.allocs {
		if a.NodeID == nodeID {
			cp := *a
			out = append(out, &cp)
		}
	}
	return out, nil
}

func (b *fakeBackend) NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error) {
	b.mu.Lock()
	b.fetches++
	b.mu.Unlock()
	for {
		b.mu.Lock()
		ch := b.changed
		if b.index > minIndex || ctx.Err() != nil {
			var out []*structs.Allocation
			for _, a := range b.allocs {
				if a.NodeID == nodeID {
					cp := *a
					out = append(out, &cp)
				}
			}
			idx := b.index
			b.mu.Unlock()
			return out, idx, nil
		}
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

func (b *fakeBackend) UpdateAllocs(_ context.Context, updates []*structs.Allocation) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range updates {
		if a := b.allocs[u.ID]; a != nil {
			a.ClientStatus = u.ClientStatus
		}
	}
	b.updates++
	b.bump()
	return nil
}

func (b *fakeBackend) Heartbeat(_ context.Context, nodeID string) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes[nodeID] == nil {
		return 0, structs.ErrUnknownNode
	}
	b.heartbeats++
	return 10 * time.Second, nil
}

func (b *fakeBackend) Node(_ context.Context, id string) (*structs.Node, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.nodes[id]; n != nil {
		cp := *n
		return &cp, nil
	}
	return nil, nil
}

func (b *fakeBackend) Alloc(_ context.Context, id string) (*structs.Allocation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.allocs[id]; a != nil {
		cp := *a
		return &cp, nil
	}
	return nil, nil
}

func (b *fakeBackend) Leader() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leader, b.leaderAddr
}

func (b *fakeBackend) setLeader(isLeader bool, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leader, b.leaderAddr = isLeader, addr
}

func (b *fakeBackend) addAlloc(a *structs.Allocation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cp := *a
	b.allocs[a.ID] = &cp
	b.bump()
}

func (b *fakeBackend) alloc(id string) structs.Allocation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return *b.allocs[id]
}

func (b *fakeBackend) node(id string) *structs.Node {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nodes[id]
}

func (b *fakeBackend) counts() (registers, updates, heartbeats int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.registers, b.updates, b.heartbeats
}

// startServer serves b on 127.0.0.1:0 and returns the server and its
// address; the server is closed at the end of the test.
func startServer(t *testing.T, b Backend, srvTLS, dial *tls.Config) (*Server, string) {
	t.Helper()
	s, err := NewServer(ServerConfig{Backend: b, TLS: srvTLS, DialTLS: dial, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
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

func newTestClient(t *testing.T, servers []string, tlsCfg *tls.Config, nodeID, secret string) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Servers: servers, TLS: tlsCfg, NodeID: nodeID, NodeSecret: secret,
		Logger: testLogger(t), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}
