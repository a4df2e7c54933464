package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/sitoken"
	"github.com/meshlet/meshlet/structs"
)

// recordingMinter answers Derive from its table and records the callers.
type recordingMinter struct {
	mu    sync.Mutex
	calls []string // node/alloc/task
}

func (m *recordingMinter) Derive(_ context.Context, nodeID, allocID, task string) (*acl.Token, error) {
	m.mu.Lock()
	m.calls = append(m.calls, nodeID+"/"+allocID+"/"+task)
	m.mu.Unlock()
	switch allocID {
	case "mine":
		return &acl.Token{AccessorID: "acc", SecretID: "secret-" + task}, nil
	case "theirs":
		return nil, fmt.Errorf("%w: allocation theirs is not placed on node %s", sitoken.ErrRefused, nodeID)
	case "broken":
		return nil, errors.New("etcd unavailable")
	}
	return nil, fmt.Errorf("%w %s", sitoken.ErrUnknownAlloc, allocID)
}

// startWorkloadServer serves b with minter as WorkloadTokens (none when
// nil) and returns a registered client of node-1.
func startWorkloadServer(t *testing.T, minter WorkloadTokenMinter) *Client {
	t.Helper()
	p, b, logs := newPKI(t), newFakeBackend(), &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	srvTLS, dial := p.serverTLSPair("server")
	s, err := NewServer(ServerConfig{Backend: b, TLS: srvTLS, DialTLS: dial, Logger: traceLogger(logs, "server"), WorkloadTokens: minter})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	c, err := NewClient(ClientConfig{Servers: []string{ln.Addr().String()}, TLS: p.clientTLS(tlsutil.RoleClient, "c1"),
		NodeID: "node-1", NodeSecret: "s1", Logger: traceLogger(logs, "client"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	return c
}

// A client agent derives its sidecars' tokens through the servers, which
// pass the authenticated node (not one the body could name) to the
// minter; refusals, unknown allocations and disabled ACLs come back as
// their sentinels.
func TestDeriveSIToken(t *testing.T) {
	m := &recordingMinter{}
	c := startWorkloadServer(t, m)
	ctx := ctxT(t, 20*time.Second)
	secret, err := c.DeriveSIToken(ctx, "mine", "connect-proxy-web")
	if err != nil || secret != "secret-connect-proxy-web" {
		t.Fatalf("DeriveSIToken = %q, %v", secret, err)
	}
	if _, err := c.DeriveSIToken(ctx, "theirs", "connect-proxy-web"); !errors.Is(err, ErrForbidden) {
		t.Errorf("another node's allocation: %v, want ErrForbidden", err)
	}
	if _, err := c.DeriveSIToken(ctx, "nope", "connect-proxy-web"); err == nil || !strings.Contains(err.Error(), "unknown allocation") {
		t.Errorf("unknown allocation: %v", err)
	}
	if _, err := c.DeriveSIToken(ctx, "broken", "connect-proxy-web"); err == nil {
		t.Error("a minter failure answered a token")
	}
	if _, err := c.DeriveSIToken(ctx, "mine", ""); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no task: %v, want ErrBadRequest", err)
	}
	m.mu.Lock()
	for _, call := range m.calls {
		if !strings.HasPrefix(call, "node-1/") {
			t.Errorf("minter called for %q, want the authenticated node-1", call)
		}
	}
	m.mu.Unlock()

	off := startWorkloadServer(t, nil)
	if _, err := off.DeriveSIToken(ctx, "mine", "connect-proxy-web"); !errors.Is(err, acl.ErrDisabled) {
		t.Errorf("servers without ACLs: %v, want acl.ErrDisabled", err)
	}
}
