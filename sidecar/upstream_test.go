package sidecar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// countingServer is an httptest server that counts the connections it
// accepted.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func plainDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// do sends one request through tr and returns the status and body.
func do(t *testing.T, tr *h1Transport, method, url, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("bad request: %v", err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: failed to read the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// The pool keeps one connection for sequential requests, and a connection
// the upstream closed while idle is replaced without failing the request,
// with or without a request body.
func TestH1TransportReuseAndStaleConnections(t *testing.T) {
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	tr := newH1Transport(plainDial)
	t.Cleanup(tr.CloseIdleConnections)
	for i := 0; i < 3; i++ {
		if code, body := do(t, tr, "GET", srv.URL+"/a", ""); code != 200 || body != "GET /a " {
			t.Fatalf("GET = %d %q", code, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("3 sequential GETs used %d upstream connections, want 1", n)
	}
	steps := []struct{ method, body, want string }{
		{"GET", "", "GET /b "},                 // replayed on a new connection
		{"POST", "payload", "POST /b payload"}, // the closed connection is detected before use
	}
	for _, s := range steps {
		srv.CloseClientConnections()
		// Wait until the close reached our side, so the pooled connection
		// is certainly stale.
		waitStale(t, tr)
		if code, body := do(t, tr, s.method, srv.URL+"/b", s.body); code != 200 || body != s.want {
			t.Fatalf("%s after the upstream closed idle connections = %d %q, want 200 %q", s.method, code, body, s.want)
		}
	}
}

// waitStale waits until the pooled connection sees the upstream's close.
func waitStale(t *testing.T, tr *h1Transport) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		tr.mu.Lock()
		stale := true
		for _, list := range tr.idle {
			for _, pc := range list {
				stale = stale && !connAlive(pc.conn)
			}
		}
		tr.mu.Unlock()
		if stale {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the pooled connection never saw the upstream's close")
}

// An upstream may answer before reading the request body (with or without
// announcing a close); the exchange completes instead of blocking on the
// unread body, and that connection is not reused.
func TestH1TransportEarlyResponse(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("connection_close=%v", announce), func(t *testing.T) {
			srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" {
					if announce {
						w.Header().Set("Connection", "close")
					}
					http.Error(w, "too large", http.StatusRequestEntityTooLarge)
					return
				}
				io.WriteString(w, "ok")
			}))
			tr := newH1Transport(plainDial)
			t.Cleanup(tr.CloseIdleConnections)
			big := strings.Repeat("x", 16<<20)
			if code, _ := do(t, tr, "POST", srv.URL, big); code != http.StatusRequestEntityTooLarge {
				t.Fatalf("POST = %d, want 413", code)
			}
			if code, body := do(t, tr, "GET", srv.URL, ""); code != 200 || body != "ok" {
				t.Fatalf("GET after the early response = %d %q", code, body)
			}
			if n := conns.Load(); n != 2 {
				t.Fatalf("upstream connections = %d, want 2 (the first is not reused)", n)
			}
		})
	}
}

// slowReportConn returns from each write a delay after the bytes went out:
// the upstream reads the whole request and answers while the request
// writer has not reported yet.
type slowReportConn struct {
	net.Conn
	delay time.Duration
}

func (c *slowReportConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	time.Sleep(c.delay)
	return n, err
}

// A connection whose request writer reports a moment after the response
// ended is still pooled (it waits for the writer as net/http does), so
// sequential POSTs share one connection; a writer that does not report in
// time gives its connection up.
func TestH1TransportLateWriterReuse(t *testing.T) {
	for _, c := range []struct {
		delay time.Duration
		conns int64
	}{{10 * time.Millisecond, 1}, {200 * time.Millisecond, 2}} {
		t.Run(c.delay.String(), func(t *testing.T) {
			srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b := make([]byte, r.ContentLength)
				_, _ = io.ReadFull(r.Body, b)
				fmt.Fprintf(w, "%s", b)
			}))
			tr := newH1Transport(func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := plainDial(ctx, addr)
				if err != nil {
					return nil, err
				}
				return &slowReportConn{Conn: conn, delay: c.delay}, nil
			})
			t.Cleanup(tr.CloseIdleConnections)
			for i := 0; i < 2; i++ {
				req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("hello"))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("POST %d: %v", i, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "hello" {
					t.Fatalf("POST %d answered %q, %v", i, b, err)
				}
			}
			if n := conns.Load(); n != c.conns {
				t.Fatalf("2 POSTs whose writer reported %s late used %d upstream connections, want %d", c.delay, n, c.conns)
			}
		})
	}
}

// A request whose context ends while waiting for the upstream fails with
// the context's error and its connection is not pooled.
func TestH1TransportContextDeadline(t *testing.T) {
	release := make(chan struct{})
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	tr := newH1Transport(plainDial)
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RoundTrip error = %v, want context.DeadlineExceeded", err)
	}
	tr.mu.Lock()
	pooled := len(tr.idle)
	tr.mu.Unlock()
	if pooled != 0 {
		t.Fatalf("%d endpoints have pooled connections after a timed-out request, want 0", pooled)
	}
}

func TestConnAlive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	defer ln.Close()
	cases := []struct {
		name string
		peer func(net.Conn)
		want bool
	}{
		{"open and quiet", func(net.Conn) {}, true},
		{"pending bytes", func(c net.Conn) { c.Write([]byte("x")) }, true},
		{"closed by the peer", func(c net.Conn) { c.Close() }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatalf("failed to dial: %v", err)
			}
			defer c.Close()
			peer, err := ln.Accept()
			if err != nil {
				t.Fatalf("failed to accept: %v", err)
			}
			defer peer.Close()
			tc.peer(peer)
			if tc.want {
				if got := connAlive(c); !got {
					t.Fatal("connAlive = false, want true")
				}
				return
			}
			deadline := time.Now().Add(waitTimeout)
			for connAlive(c) {
				if time.Now().After(deadline) {
					t.Fatal("connAlive stayed true after the peer closed")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// Through web -> (mTLS) -> api: a streaming response reaches the client
// while the app is still writing it (no buffering until the end), a 101
// upgrade relays bytes both ways.
func TestHTTPMeshStreamingAndUpgrade(t *testing.T) {
	finish := map[string]chan struct{}{"/stream": make(chan struct{}), "/sized": make(chan struct{})}
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream", "/sized":
			if r.URL.Path == "/sized" {
				w.Header().Set("Content-Length", "13") // known length, still trickling
			}
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-finish[r.URL.Path]
			io.WriteString(w, "second\n")
		case "/upgrade":
			hijackEcho(w, r)
		}
	}))
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)

	// Chunked and known-length responses, both flushed piece by piece
	// as they arrive, deliver the first line before the
	// app writes the second.
	for _, path := range []string{"/stream", "/sized"} {
		resp, err := client.Get(m.webURL() + path[1:])
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
			t.Fatalf("GET %s: first streamed line = %q, %v", path, line, err)
		}
		close(finish[path])
		if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
			t.Fatalf("GET %s: rest of the stream = %q, %v", path, rest, err)
		}
		resp.Body.Close()
	}

	c, ubr := rawConn(t, m)
	fmt.Fprintf(c, "GET /upgrade HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	uresp, err := http.ReadResponse(ubr, nil)
	if err != nil || uresp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade response = %v, %v", uresp, err)
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := ubr.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("upgraded echo = %q, %v", line, err)
	}
}

// hijackEcho answers 101, switching to the protocol r asked for, and
// echoes lines on the raw connection.
func hijackEcho(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString(line)
		brw.Flush()
	}
}

// A route timeout answers 504 through the mesh.
func TestHTTPMeshRouteTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	m := newHTTPMeshRoutes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), func(rc *routev3.RouteConfiguration) {
		rc.VirtualHosts[0].Routes[0].GetRoute().Timeout = durationpb.New(100 * time.Millisecond)
	})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(m.webURL())
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("GET past the route timeout = %d, want 504", resp.StatusCode)
	}
}

// An upgrade request with a body: the upstream answers 101 before reading
// the body, and the relay takes over the downstream connection only once
// the body has been written upstream, so the body and the bytes sent after
// the switch reach the upstream in order (and the body's writer and the
// relay never read the downstream buffer at once: run with -race).
func TestHTTPMeshUpgradeWithBody(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hijackEcho(w, r) }))
	c, ubr := rawConn(t, m)
	// The body is still arriving when the upstream's 101 comes back (a
	// large body behaves so): its rest follows a moment later.
	fmt.Fprintf(c, "POST /upgrade HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 6\r\n\r\nhel")
	time.Sleep(100 * time.Millisecond)
	fmt.Fprintf(c, "lo ")
	uresp, err := http.ReadResponse(ubr, nil)
	if err != nil || uresp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade response = %v, %v", uresp, err)
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := ubr.ReadString('\n'); err != nil || line != "hello ping\n" {
		t.Fatalf("upgraded echo = %q, %v; want the body, then what followed the switch", line, err)
	}
}
