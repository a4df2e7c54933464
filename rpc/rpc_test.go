package rpc

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// A node registers, long-polls its allocations (woken by a change in the
// backend), reports a status and heartbeats, over mutual TLS and HTTP/2.
func TestRoundTripTLS(t *testing.T) {
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	c := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "client"), "", "")
	roundTrip(t, b, c)
	assertHTTP2(t, addr, p.clientTLS(tlsutil.RoleClient, "client2"))
}

// Without TLS the same calls work over plain HTTP.
func TestRoundTripPlaintext(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b, nil, nil)
	c := newTestClient(t, []string{addr}, nil, "", "")
	roundTrip(t, b, c)
}

func roundTrip(t *testing.T, b *fakeBackend, c *Client) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	node := &structs.Node{ID: "node-1", Name: "web-1", SecretID: "s3cret"}
	if err := c.RegisterNode(ctx, node); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	if got := b.node("node-1"); got == nil || got.SecretID != "s3cret" || got.Name != "web-1" {
		t.Fatalf("backend node = %+v, want node-1 with its secret", got)
	}
	allocs, idx, err := c.NodeAllocs(ctx, "node-1", 0)
	if err != nil || len(allocs) != 0 || idx == 0 {
		t.Fatalf("NodeAllocs(0) = %v, %d, %v", allocs, idx, err)
	}
	type result struct {
		allocs []*structs.Allocation
		idx    uint64
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		a, i, err := c.NodeAllocs(ctx, "node-1", idx)
		ch <- result{a, i, err}
	}()
	select {
	case r := <-ch:
		t.Fatalf("NodeAllocs(%d) returned before any change: %+v", idx, r)
	case <-time.After(300 * time.Millisecond):
	}
	b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", ClientStatus: structs.AllocClientStatusPending})
	b.addAlloc(&structs.Allocation{ID: "a2", NodeID: "node-2"})
	var r result
	select {
	case r = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll not woken by the change")
	}
	if r.err != nil || r.idx <= idx || len(r.allocs) != 1 || r.allocs[0].ID != "a1" {
		t.Fatalf("NodeAllocs(%d) = %+v", idx, r)
	}
	upd := []*structs.Allocation{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}
	if err := c.UpdateAllocs(ctx, upd); err != nil {
		t.Fatalf("UpdateAllocs: %v", err)
	}
	if got := b.alloc("a1").ClientStatus; got != structs.AllocClientStatusRunning {
		t.Fatalf("a1 client status = %q, want running", got)
	}
	ttl, err := c.Heartbeat(ctx, "node-1")
	if err != nil || ttl != 10*time.Second {
		t.Fatalf("Heartbeat = %v, %v", ttl, err)
	}
}

func assertHTTP2(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	dial, err := dialTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(dial)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodGet, "https://"+addr+pathAllocs+"?node_id=node-1", nil)
	req.Header.Set(HeaderNodeID, "node-1")
	req.Header.Set(HeaderNodeSecret, "s3cret")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
}

// A second registration of a node ID with another secret is refused, as
// is every call with the wrong secret; the stored secret is unchanged.
func TestWrongSecretForbidden(t *testing.T) {
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	ctx := ctxT(t, 10*time.Second)
	good := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "right")
	if err := good.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	bad := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "c2"), "node-1", "wrong")
	err := bad.RegisterNode(ctx, &structs.Node{ID: "node-1", Name: "impostor"})
	wantErr(t, "register with the wrong secret", err, ErrForbidden)
	if !strings.Contains(err.Error(), "node secret mismatch") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("error %q: want the mismatch named and the secret not shown", err)
	}
	_, _, err = bad.NodeAllocs(ctx, "node-1", 0)
	wantErr(t, "read with the wrong secret", err, ErrForbidden)
	_, err = bad.Heartbeat(ctx, "node-1")
	wantErr(t, "heartbeat with the wrong secret", err, ErrForbidden)
	if n := b.node("node-1"); n.SecretID != "right" || n.Name == "impostor" {
		t.Fatalf("stored node changed: %+v", n)
	}
	if regs, _, hbs := b.counts(); regs != 1 || hbs != 0 {
		t.Fatalf("backend saw %d registrations and %d heartbeats, want 1 and 0", regs, hbs)
	}
}

// A node reads only its own allocations and updates only those placed on
// it; a batch with one foreign allocation is refused whole.
func TestOtherNodeForbidden(t *testing.T) {
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	ctx := ctxT(t, 10*time.Second)
	c := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	b.addAlloc(&structs.Allocation{ID: "mine", NodeID: "node-1", ClientStatus: structs.AllocClientStatusPending})
	b.addAlloc(&structs.Allocation{ID: "theirs", NodeID: "node-2", ClientStatus: structs.AllocClientStatusPending})

	_, _, err := c.NodeAllocs(ctx, "node-2", 0)
	wantErr(t, "read another node's allocations", err, ErrForbidden)

	_, updatesBefore, _ := b.counts()
	err = c.UpdateAllocs(ctx, []*structs.Allocation{
		{ID: "mine", ClientStatus: structs.AllocClientStatusRunning},
		{ID: "theirs", ClientStatus: structs.AllocClientStatusFailed},
	})
	wantErr(t, "update another node's allocation", err, ErrForbidden)
	err = c.UpdateAllocs(ctx, []*structs.Allocation{{ID: "mine", NodeID: "node-2", ClientStatus: structs.AllocClientStatusRunning}})
	wantErr(t, "update claiming another node", err, ErrForbidden)
	if _, updates, _ := b.counts(); updates != updatesBefore {
		t.Fatalf("backend applied %d update batches, want none", updates-updatesBefore)
	}
	for _, id := range []string{"mine", "theirs"} {
		if got := b.alloc(id).ClientStatus; got != structs.AllocClientStatusPending {
			t.Fatalf("%s client status = %q, want pending (nothing applied)", id, got)
		}
	}
	// Updates of allocations the server forgot are dropped, not refused.
	err = c.UpdateAllocs(ctx, []*structs.Allocation{{ID: "mine", ClientStatus: structs.AllocClientStatusRunning}, {ID: "gone"}})
	if err != nil || b.alloc("mine").ClientStatus != structs.AllocClientStatusRunning {
		t.Fatalf("UpdateAllocs with a forgotten allocation: %v", err)
	}
}

// A CLI certificate is refused with 403; a certificate from another CA
// fails the handshake; neither reaches the backend.
func TestCertificatesRefused(t *testing.T) {
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	ctx := ctxT(t, 10*time.Second)

	cli := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleCLI, "cli"), "node-1", "s1")
	err := cli.RegisterNode(ctx, &structs.Node{ID: "node-1"})
	wantErr(t, "cli certificate", err, ErrForbidden)

	other := newPKI(t)
	otherCfg := other.config(tlsutil.RoleClient, "foreign")
	otherCfg.CAFile = p.caFile // trusts our servers, but its own cert is foreign
	foreignTLS, err := otherCfg.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	foreign := newTestClient(t, []string{addr}, foreignTLS, "node-1", "s1")
	err = foreign.RegisterNode(ctx, &structs.Node{ID: "node-1"})
	// With TLS 1.3 the client may see the refusal as a closed connection
	// rather than the server's alert: only the outcome is checked.
	wantErr(t, "foreign CA", err, ErrNoServers)
	if regs, _, _ := b.counts(); regs != 0 || b.node("node-1") != nil {
		t.Fatalf("backend saw %d registrations, want 0", regs)
	}
}

// A client refuses a "server" whose certificate is a client's.
func TestClientRequiresServerRole(t *testing.T) {
	p := newPKI(t)
	c := p.config(tlsutil.RoleClient, "fake-server")
	srvTLS, err := c.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	_, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	cl := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	err = cl.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"})
	wantErr(t, "server with a client certificate", err, ErrNoServers)
	if regs, _, _ := b.counts(); regs != 0 {
		t.Fatalf("backend saw %d registrations, want 0", regs)
	}
}

// Malformed calls: trailing data after the JSON body, missing headers, a
// client certificate claiming to forward, an unknown node's heartbeat.
func TestMalformedCalls(t *testing.T) {
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	b := newFakeBackend()
	_, addr := startServer(t, b, srvTLS, dial)
	clientDial, err := dialTLS(p.clientTLS(tlsutil.RoleClient, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(clientDial)
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		name, body, id, secret, forwarded string
		want                              int
	}{
		{"trailing data", `{"ID":"n1"} {}`, "n1", "s", "", http.StatusBadRequest},
		{"unknown field is fine", `{"ID":"n1","Bogus":1}`, "n1", "s", "", http.StatusOK},
		{"no node ID", `{"ID":"n1"}`, "", "s", "", http.StatusBadRequest},
		{"no secret", `{"ID":"n1"}`, "n1", "", "", http.StatusForbidden},
		{"registers another node", `{"ID":"n2"}`, "n1", "s", "", http.StatusForbidden},
		{"client claims forwarding", `{"ID":"n1"}`, "n1", "s", "1", http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodPost, "https://"+addr+pathRegister, bytes.NewBufferString(tc.body))
		req.Header.Set(HeaderNodeID, tc.id)
		req.Header.Set(HeaderNodeSecret, tc.secret)
		if tc.forwarded != "" {
			req.Header.Set(HeaderForwarded, tc.forwarded)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	c := newTestClient(t, []string{addr}, p.clientTLS(tlsutil.RoleClient, "c2"), "ghost", "s")
	_, err = c.Heartbeat(ctxT(t, 5*time.Second), "ghost")
	wantErr(t, "unknown node's heartbeat", err, structs.ErrUnknownNode)
}

// A long-poll whose wait ends without change is polled again: NodeAllocs
// returns only once the index passes minIndex.
func TestLongPollPollsAgain(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b, nil, nil)
	c, err := NewClient(ClientConfig{Servers: []string{addr}, NodeID: "node-1", NodeSecret: "s1",
		Logger: testLogger(t), BlockingWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	_, idx, err := c.NodeAllocs(ctx, "node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(600*time.Millisecond, func() { b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1"}) })
	start := time.Now()
	allocs, next, err := c.NodeAllocs(ctx, "node-1", idx)
	if err != nil || next <= idx || len(allocs) != 1 {
		t.Fatalf("NodeAllocs(%d) = %v, %d, %v; want a1 at a later index", idx, allocs, next, err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("NodeAllocs returned after %v, before the change", d)
	}
}
