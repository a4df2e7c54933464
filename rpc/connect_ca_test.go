package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// script returns RotateCA work answering errs in turn, then nil.
func script(errs ...error) func(context.Context) error {
	var mu sync.Mutex
	return func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) == 0 {
			return nil
		}
		err := errs[0]
		errs = errs[1:]
		return err
	}
}

func (f *fakeConnect) rotateCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rotations
}

// A client agent has the servers rotate a real CA's root: a new active
// root, cross-signed by the old one, both trusted.
func TestConnectRotateCA(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	mgr, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close() })
	before := mgr.Roots()
	m.f.mu.Lock()
	m.f.rotate = mgr.Rotate
	m.f.mu.Unlock()

	if err := m.c.RotateCA(ctx); err != nil {
		t.Fatalf("RotateCA: %v", err)
	}
	after := mgr.Roots()
	if len(after.Roots) != 2 || after.ActiveRootID == before.ActiveRootID || m.f.rotateCount() != 1 {
		t.Fatalf("after RotateCA: %d roots, active %s (was %s), %d rotations; want 2 roots, a new active one, 1 rotation",
			len(after.Roots), after.ActiveRootID, before.ActiveRootID, m.f.rotateCount())
	}

	// Only an authenticated node may rotate.
	bad := newTestClient(t, []string{m.addr}, m.p.clientTLS(tlsutil.RoleClient, "bad"), "node-1", "wrong")
	wantErr(t, "rotate with a wrong secret", bad.RotateCA(ctx), ErrForbidden)
	if got := rawStatus(t, m, http.MethodPost, pathConnectCARotate, "", "wrong"); got != http.StatusForbidden {
		t.Errorf("raw rotate with a wrong secret: status %d, want 403", got)
	}
	unknown := newTestClient(t, []string{m.addr}, m.p.clientTLS(tlsutil.RoleClient, "c9"), "node-9", "s9")
	wantErr(t, "rotate by an unregistered node", unknown.RotateCA(ctx), structs.ErrUnknownNode)
	if got := rawStatus(t, m, http.MethodGet, pathConnectCARotate, "", "s1"); got == http.StatusOK {
		t.Errorf("GET rotate: status %d, want a refusal", got)
	}
	if n := m.f.rotateCount(); n != 1 || len(mgr.Roots().Roots) != 2 {
		t.Fatalf("refused calls rotated: %d rotations, %d roots", n, len(mgr.Roots().Roots))
	}
}

// A rotation that lost a race with another server's change is a 409 the
// client turns back into ca.ErrStateConflict, tried once and not sent to
// the next server (the caller, consulapi's PUT, is the one retry loop). A
// 5xx moves to the next server.
func TestConnectRotateCAFailures(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	srvTLS, dial := m.p.serverTLSPair("server-2")
	_, addr2 := startConnectServer(t, m.b, m.f, srvTLS, dial, nil)
	c := newTestClient(t, []string{m.addr, addr2}, m.p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	conflict := fmt.Errorf("failed to rotate CA root: %w", ca.ErrStateConflict)
	for _, tc := range []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   error
	}{
		{"a lost race", []error{conflict, conflict}, 1, ca.ErrStateConflict},
		{"a failing server", []error{errors.New("etcd: request timed out")}, 2, nil},
	} {
		m.f.mu.Lock()
		m.f.rotations, m.f.rotate = 0, script(tc.errs...)
		m.f.mu.Unlock()
		err := c.RotateCA(ctx)
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) || m.f.rotateCount() != tc.wantCalls {
			t.Errorf("%s: RotateCA = %v after %d rotate calls; want %v after %d", tc.name, err, m.f.rotateCount(), tc.wantErr, tc.wantCalls)
		}
		wantNot(t, tc.name, err, ErrNoServers)
		if err != nil && !strings.Contains(err.Error(), "CA state changed concurrently") {
			t.Errorf("%s: error %q lost the server's text", tc.name, err)
		}
	}

	// A server without the mesh calls says so.
	b := newFakeBackend()
	_, addr := startServer(t, b, nil, nil)
	plain := newTestClient(t, []string{addr}, nil, "node-1", "s1")
	if err := plain.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "rotate without connect", plain.RotateCA(ctx), ErrConnectNotServed)
}
