package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// fakeACL is an in-memory acl.Reader; fail, when set, fails every call.
type fakeACL struct {
	mu       sync.Mutex
	tokens   map[string]*acl.Token // by secret hash
	policies map[string]*acl.Policy
	fail     error
	calls    int
}

func newFakeACL() *fakeACL {
	return &fakeACL{tokens: map[string]*acl.Token{}, policies: map[string]*acl.Policy{}}
}

func (f *fakeACL) TokenBySecretHash(_ context.Context, hash string) (*acl.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, f.fail
	}
	t := f.tokens[hash]
	if t == nil {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	cp := *t
	return &cp, nil
}

func (f *fakeACL) Policies(_ context.Context, names []string) ([]*acl.Policy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, f.fail
	}
	var out []*acl.Policy
	for _, n := range names {
		if p := f.policies[n]; p != nil {
			cp := *p
			out = append(out, &cp)
		}
	}
	return out, nil
}

func (f *fakeACL) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeACL) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// startACLServer serves b with rd as its ACL reader (none when nil) on
// 127.0.0.1:0, logging to logs; it is closed at the end of the test.
func startACLServer(t *testing.T, b Backend, rd acl.Reader, srvTLS, dial *tls.Config, logs *testutil.SyncBuffer) string {
	t.Helper()
	s, err := NewServer(ServerConfig{Backend: b, ACL: rd, TLS: srvTLS, DialTLS: dial, Logger: traceLogger(logs, t.Name())})
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
	return ln.Addr().String()
}

// traceLogger logs at trace level into b (printed if the test fails).
func traceLogger(b *testutil.SyncBuffer, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: b})
}

// aclFixture is TLS servers sharing one node backend, each with its own
// ACL reader, and a client of node-1 (secret s1) over all of them.
type aclFixture struct {
	p     *pki
	b     *fakeBackend
	addrs []string
	logs  *testutil.SyncBuffer
	c     *Client
}

func newACLFixture(t *testing.T, readers ...acl.Reader) *aclFixture {
	t.Helper()
	f := &aclFixture{p: newPKI(t), b: newFakeBackend(), logs: &testutil.SyncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", f.logs)
		}
	})
	srvTLS, dial := f.p.serverTLSPair("server")
	for _, rd := range readers {
		f.addrs = append(f.addrs, startACLServer(t, f.b, rd, srvTLS, dial, f.logs))
	}
	c, err := NewClient(ClientConfig{Servers: f.addrs, TLS: f.p.clientTLS(tlsutil.RoleClient, "c1"), NodeID: "node-1",
		NodeSecret: "s1", Logger: traceLogger(f.logs, "client"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	f.c = c
	if err := c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	return f
}

// rawACL sends one ACL call with node-1's credentials (secret) and
// returns the status, the error code and the body.
func (f *aclFixture) rawACL(t *testing.T, path, body, secret string) (int, string, string) {
	t.Helper()
	dial, err := dialTLS(f.p.clientTLS(tlsutil.RoleClient, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(dial)
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodPost, "https://"+f.addrs[0]+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderNodeID, "node-1")
	req.Header.Set(HeaderNodeSecret, secret)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(headerErrorCode), string(b)
}

// A client agent resolves tokens and policies through a server: found
// tokens come without their secret, unknown ones are ErrTokenNotFound,
// missing policies are skipped; no hash reaches any log.
func TestACLReader(t *testing.T) {
	rd := newFakeACL()
	secret := acl.NewSecret()
	hash := acl.HashSecret(secret)
	exp := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	rd.tokens[hash] = &acl.Token{AccessorID: "acc-1", SecretID: secret, SecretHash: hash, Name: "ci", Type: acl.TypeClient,
		Policies: []string{"read", "gone"}, ExpirationTime: &exp, CreateIndex: 7, ModifyIndex: 9}
	rd.policies["read"] = &acl.Policy{Name: "read", Rules: `node { policy = "read" }`, CreateIndex: 3, ModifyIndex: 4}
	f := newACLFixture(t, rd)
	ctx := ctxT(t, 10*time.Second)
	r := f.c.ACL()

	tok, err := r.TokenBySecretHash(ctx, hash)
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessorID != "acc-1" || tok.SecretID != "" || tok.SecretHash != hash || tok.Type != acl.TypeClient ||
		len(tok.Policies) != 2 || !tok.ExpirationTime.Equal(exp) || tok.CreateIndex != 7 || tok.ModifyIndex != 9 {
		t.Fatalf("resolved token %+v", tok)
	}
	unknown := acl.HashSecret("unknown")
	_, err = r.TokenBySecretHash(ctx, unknown)
	wantErr(t, "unknown secret", err, acl.ErrTokenNotFound)
	wantNot(t, "unknown secret", err, ErrNoServers, ErrBadRequest, acl.ErrDisabled)
	_, err = r.TokenBySecretHash(ctx, "")
	wantErr(t, "empty hash", err, acl.ErrTokenNotFound)

	ps, err := r.Policies(ctx, tok.Policies)
	if err != nil || len(ps) != 1 || ps[0].Name != "read" || ps[0].Rules != `node { policy = "read" }` || ps[0].ModifyIndex != 4 {
		t.Fatalf("Policies = %v, %v", ps, err)
	}
	if ps, err := r.Policies(ctx, []string{"gone"}); err != nil || len(ps) != 0 {
		t.Fatalf("Policies of missing names = %v, %v", ps, err)
	}
	before := rd.callCount()
	if ps, err := r.Policies(ctx, nil); err != nil || ps != nil || rd.callCount() != before {
		t.Fatalf("Policies(nil) = %v, %v after %d server calls", ps, err, rd.callCount()-before)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "resolved ACL token") {
		t.Fatalf("no debug log of the resolution; logs:\n%s", logs)
	}
	for _, s := range []string{secret, hash, unknown} {
		if strings.Contains(logs, s) {
			t.Fatalf("logs hold a secret or its hash %q", s)
		}
	}
}

// Without an ACL reader a server answers acl.ErrDisabled.
func TestACLDisabled(t *testing.T) {
	f := newACLFixture(t, nil)
	ctx := ctxT(t, 10*time.Second)
	_, err := f.c.ACL().TokenBySecretHash(ctx, acl.HashSecret("x"))
	wantErr(t, "token call", err, acl.ErrDisabled)
	wantNot(t, "token call", err, acl.ErrTokenNotFound, ErrNoServers)
	_, err = f.c.ACL().Policies(ctx, []string{"read"})
	wantErr(t, "policies call", err, acl.ErrDisabled)
}

// The calls need an authenticated node and well-formed bodies.
func TestACLCallsRefused(t *testing.T) {
	rd := newFakeACL()
	f := newACLFixture(t, rd)
	for _, c := range []struct {
		path, body, secret string
		status             int
	}{
		{pathACLToken, `{"SecretHash":"00"}`, "wrong", http.StatusForbidden},
		{pathACLPolicies, `{"Names":["a"]}`, "wrong", http.StatusForbidden},
		{pathACLToken, `{"SecretHash":`, "s1", http.StatusBadRequest},
		{pathACLPolicies, `{"Names":"a"}`, "s1", http.StatusBadRequest},
		{pathACLPolicies, `{"Names":[` + strings.Repeat(`"a",`, maxACLPolicyNames) + `"a"]}`, "s1", http.StatusBadRequest},
		{pathACLToken, `{"SecretHash":"00"}`, "s1", http.StatusNotFound},
	} {
		if got, _, _ := f.rawACL(t, c.path, c.body, c.secret); got != c.status {
			t.Fatalf("POST %s %.40s with secret %s: status %d, want %d", c.path, c.body, c.secret, got, c.status)
		}
	}
	if _, code, _ := f.rawACL(t, pathACLToken, `{"SecretHash":"00"}`, "s1"); code != codeACLTokenNotFound {
		t.Fatalf("unknown token: code %q, want %q", code, codeACLTokenNotFound)
	}
	// A reader that (wrongly) hands out a secret: the server never sends it.
	hash := acl.HashSecret("leaked")
	rd.tokens[hash] = &acl.Token{AccessorID: "acc", SecretID: "leaked", SecretHash: hash, Type: acl.TypeManagement}
	if status, _, body := f.rawACL(t, pathACLToken, `{"SecretHash":"`+hash+`"}`, "s1"); status != http.StatusOK ||
		!strings.Contains(body, `"acc"`) || strings.Contains(body, "leaked") || strings.Contains(body, "SecretID") {
		t.Fatalf("token answer %d %s", status, body)
	}
	names := make([]string, maxACLPolicyNames+1)
	_, err := f.c.ACL().Policies(ctxT(t, 5*time.Second), names)
	wantErr(t, "too many names", err, ErrBadRequest)
}

// A server whose state fails sends the call to the next one; when every
// server fails the call is ErrNoServers, not a missing token.
func TestACLFailover(t *testing.T) {
	broken, good := newFakeACL(), newFakeACL()
	broken.setFail(errors.New("etcd unavailable"))
	hash := acl.HashSecret("s")
	good.tokens[hash] = &acl.Token{AccessorID: "acc", SecretHash: hash, Type: acl.TypeManagement}
	f := newACLFixture(t, broken, good)
	ctx := ctxT(t, 10*time.Second)
	tok, err := f.c.ACL().TokenBySecretHash(ctx, hash)
	if err != nil || tok.AccessorID != "acc" {
		t.Fatalf("TokenBySecretHash past a failing server = %+v, %v", tok, err)
	}
	if broken.callCount() == 0 {
		t.Fatal("the failing server was never asked; the test proves nothing")
	}
	good.setFail(errors.New("etcd unavailable"))
	_, err = f.c.ACL().TokenBySecretHash(ctx, hash)
	wantErr(t, "every server failing", err, ErrNoServers)
	wantNot(t, "every server failing", err, acl.ErrTokenNotFound)
	if strings.Contains(f.logs.String(), hash) {
		t.Fatal("a failure's logs hold the secret hash")
	}
}
