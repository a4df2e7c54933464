package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/structs"
)

func wantBatch(t *testing.T, b meshstate.Batch, rev int64, reset bool, allocs int) {
	t.Helper()
	if b.Revision != rev || b.Reset != reset || len(b.Allocs) != allocs {
		t.Fatalf("batch = revision %d, reset %v, %d allocs; want revision %d, reset %v, %d allocs",
			b.Revision, b.Reset, len(b.Allocs), rev, reset, allocs)
	}
}

// The feed delivers batches in order; when its server closes, the client
// follows the other server, whose stream starts with a Reset holding the
// whole state, and again when that one closes and the first is back.
func TestConnectFeedFailover(t *testing.T) {
	p := newPKI(t)
	aTLS, aDial := p.serverTLSPair("a")
	bTLS, bDial := p.serverTLSPair("b")
	shared, f := newFakeBackend(), newFakeConnect(t)
	a, aAddr := startConnectServer(t, shared, f, aTLS, aDial, nil)
	b, bAddr := startConnectServer(t, shared, f, bTLS, bDial, nil)
	c := newTestClient(t, []string{aAddr, bAddr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	if err := c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	reg := func(alloc string) { f.set("node-1", alloc, []catalog.ServiceInstance{inst("node-1", alloc, "web")}) }
	reg("a1") // revision 2
	fl := follow(t, c)
	wantBatch(t, fl.next(t, 5*time.Second), 2, true, 1)
	reg("a2")
	reg("a3")
	wantBatch(t, fl.next(t, 5*time.Second), 3, false, 1)
	last := fl.next(t, 5*time.Second)
	wantBatch(t, last, 4, false, 1)
	if last.Allocs[0].AllocID != "a3" {
		t.Fatalf("batches out of order: revision 4 carries %s", last.Allocs[0].AllocID)
	}

	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatalf("close a: %v", err)
	}
	wantBatch(t, fl.next(t, 3*time.Second), 4, true, 3)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("failover took %v", d)
	}
	if got := c.cfg.Servers[c.preferred.Load()]; got != bAddr {
		t.Fatalf("following %s, want %s", got, bAddr)
	}
	reg("a4")
	wantBatch(t, fl.next(t, 5*time.Second), 5, false, 1)

	// a comes back on its address; b goes away.
	ln, err := net.Listen("tcp", aAddr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", aAddr, err)
	}
	startConnectServer(t, shared, f, aTLS, aDial, ln)
	if err := b.Close(); err != nil {
		t.Fatalf("close b: %v", err)
	}
	wantBatch(t, fl.next(t, 5*time.Second), 5, true, 4)
	reg("a5")
	wantBatch(t, fl.next(t, 5*time.Second), 6, false, 1)
	select {
	case extra := <-fl.batches:
		t.Fatalf("unexpected batch %+v", extra)
	case <-time.After(300 * time.Millisecond):
	}
}

// Server.Close ends an open stream at once (the backend's Follow
// returns); FollowConnect keeps trying until its context ends.
func TestConnectFeedServerCloseEndsStream(t *testing.T) {
	m := newMeshFixture(t)
	fl := follow(t, m.c)
	wantBatch(t, fl.next(t, 5*time.Second), 1, true, 0)
	start := time.Now()
	if err := m.s.Close(); err != nil {
		t.Fatalf("Close with a stream open: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with a stream open", d)
	}
	if _, following := m.f.followCounts(); following != 0 {
		t.Fatalf("%d Follow calls still running after Close", following)
	}
	select {
	case <-fl.done:
		t.Fatalf("FollowConnect returned %v while its context lives", fl.err)
	case <-time.After(300 * time.Millisecond):
	}
	fl.cancel()
	select {
	case <-fl.done:
		if !errors.Is(fl.err, context.Canceled) {
			t.Fatalf("FollowConnect = %v, want context.Canceled", fl.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("FollowConnect did not return after its context ended")
	}
}

// Keepalive lines flow on an idle stream, keep it open past the client's
// silence timeout, and never reach fn; the client's unary timeout does not
// cut the stream.
func TestConnectFeedKeepalive(t *testing.T) {
	m := newMeshFixture(t)
	c, err := NewClient(ClientConfig{Servers: []string{m.addr}, TLS: m.p.clientTLS(tlsutil.RoleClient, "c2"),
		NodeID: "node-1", NodeSecret: "s1", Logger: testLogger(t), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fl := follow(t, c)
	wantBatch(t, fl.next(t, 5*time.Second), 1, true, 0)
	select {
	case b := <-fl.batches:
		t.Fatalf("fn got %+v on an idle stream", b)
	case <-time.After(time.Second): // ten keepalives, three silence timeouts
	}
	if follows, _ := m.f.followCounts(); follows != 1 {
		t.Fatalf("%d streams opened, want 1 (the idle stream was dropped)", follows)
	}
	m.f.set("node-1", "a1", []catalog.ServiceInstance{inst("node-1", "a1", "web")})
	wantBatch(t, fl.next(t, 5*time.Second), 2, false, 1)

	// On the wire: the Reset, then "{}" lines.
	dial, err := dialTLS(m.p.clientTLS(tlsutil.RoleClient, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(dial)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodGet, "https://"+m.addr+pathConnectWatch, nil)
	req.Header.Set(HeaderNodeID, "node-1")
	req.Header.Set(HeaderNodeSecret, "s1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || resp.Header.Get(headerKeepalive) != "100ms" {
		t.Fatalf("watch answered %s over %s, keepalive %q", resp.Status, resp.Proto, resp.Header.Get(headerKeepalive))
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for len(lines) < 3 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	var first meshstate.Batch
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || !first.Reset || first.Revision != 2 {
		t.Fatalf("first line %q, want the Reset at revision 2", lines[0])
	}
	if len(lines) != 3 || lines[1] != "{}" || lines[2] != "{}" {
		t.Fatalf("lines after the Reset = %q, want keepalives", lines[1:])
	}
}

// A server that keeps a stream open but sends nothing is left after three
// keepalive intervals for the next server.
func TestConnectFeedSilentServer(t *testing.T) {
	stop := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != pathConnectWatch {
			http.Error(w, "not here", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set(headerKeepalive, "50ms")
		_, _ = w.Write([]byte(`{"Revision":99,"Reset":true}` + "\n"))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer silent.Close()
	defer close(stop)
	b, f := newFakeBackend(), newFakeConnect(t)
	_, addr := startConnectServer(t, b, f, nil, nil, nil)
	reg := newTestClient(t, []string{addr}, nil, "node-1", "s1")
	if err := reg.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, []string{silent.Listener.Addr().String(), addr}, nil, "node-1", "s1")
	fl := follow(t, c)
	wantBatch(t, fl.next(t, 5*time.Second), 99, true, 0)
	start := time.Now()
	wantBatch(t, fl.next(t, 5*time.Second), 1, true, 0)
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("left the silent server after %v, want about 150 ms", d)
	}
}

// fn's error ends FollowConnect with that error.
func TestConnectFeedFnError(t *testing.T) {
	m := newMeshFixture(t)
	errStop := errors.New("stop here")
	n := 0
	err := m.c.FollowConnect(ctxT(t, 10*time.Second), func(b meshstate.Batch) error {
		if n++; n == 1 {
			go m.f.set("node-1", "a1", []catalog.ServiceInstance{inst("node-1", "a1", "web")})
			return nil
		}
		return errStop
	})
	if !errors.Is(err, errStop) || n != 2 {
		t.Fatalf("FollowConnect = %v after %d batches, want errStop after 2", err, n)
	}
}
