package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// echoHead answers with what the upstream app saw of the request.
func echoHead(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s body=%q xff=%q hop=%q ua=%q expect=%q",
		r.Method, r.URL.Path, body, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Hop"),
		r.Header.Get("User-Agent"), r.Header.Get("Expect"))
}

// rawConn dials web's upstream listener for hand-written HTTP/1.x.
func rawConn(t *testing.T, m *httpMesh) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.webPort), waitTimeout)
	if err != nil {
		t.Fatalf("failed to dial web: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	return c, bufio.NewReader(c)
}

func readResp(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("failed to read a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("failed to read the body: %v", err)
	}
	resp.Body.Close()
	return resp, string(b)
}

// Pipelined keep-alive requests (a POST with a body, then a GET) come back
// in order on one connection; hop-by-hop headers stop at the proxy and
// X-Forwarded-For names the client.
func TestH1PipelinedKeepAlive(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(echoHead))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "POST /a HTTP/1.1\r\nHost: api\r\nContent-Length: 5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\n\r\nhello"+
		"GET /b HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	for _, want := range []string{`POST /a body="hello" xff="127.0.0.1, 127.0.0.1" hop="" ua=""`, `GET /b body="abc"`} {
		resp, body := readResp(t, br, http.MethodGet)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, want) {
			t.Fatalf("response = %d %q, want prefix %q", resp.StatusCode, body, want)
		}
		if resp.Close {
			t.Fatalf("response closes the connection: %v", resp.Header)
		}
	}
	if n := statValue(t, m.web, "http.upstream.api.downstream_rq_2xx"); n != 2 {
		t.Fatalf("web downstream_rq_2xx = %d, want 2", n)
	}
	// Both requests went over one pooled mTLS connection.
	if n := statValue(t, m.web, "cluster."+sniFor("api")+".upstream_cx_total"); n != 1 {
		t.Fatalf("web opened %d upstream connections, want 1 (reused)", n)
	}
}

// An HTTP/1.0 client gets a response of unknown length delimited by the
// end of the connection instead of chunks.
func TestH1HTTP10CloseDelimited(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "part1 ")
		w.(http.Flusher).Flush() // unknown length upstream: chunked
		io.WriteString(w, "part2")
	}))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "GET / HTTP/1.0\r\nHost: api\r\n\r\n")
	resp, body := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "part1 part2" || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Fatalf("HTTP/1.0 response = %d %q te=%v close=%v", resp.StatusCode, body, resp.TransferEncoding, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after an HTTP/1.0 response: %v", err)
	}
}

// Trailers of a chunked upstream response are announced and relayed after
// the body, through both proxies.
func TestH1Trailers(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "c0ffee")
	}))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: api\r\nTE: trailers\r\n\r\n")
	resp, body := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "body" {
		t.Fatalf("response = %d %q", resp.StatusCode, body)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "c0ffee" {
		t.Fatalf("trailer X-Checksum = %q, want %q (trailers %v)", got, "c0ffee", resp.Trailer)
	}
}

// "Expect: 100-continue" is answered by the proxy; the upstream gets the
// body without the expectation.
func TestH1ExpectContinue(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(echoHead))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "PUT /x HTTP/1.1\r\nHost: api\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("interim response = %q, %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("interim response not terminated: %q", blank)
	}
	fmt.Fprint(c, "data")
	resp, body := readResp(t, br, http.MethodPut)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `PUT /x body="data"`) || !strings.Contains(body, `expect=""`) {
		t.Fatalf("response = %d %q", resp.StatusCode, body)
	}
}

// Malformed and oversized request heads get 400 and 431 and the
// connection is closed; nothing reaches the upstream.
func TestH1BadRequests(t *testing.T) {
	hits := 0
	m := newHTTPMesh(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	cases := []struct {
		name, head string
		code       int
	}{
		{"garbage", "NOT HTTP AT ALL\r\n\r\n", http.StatusBadRequest},
		{"no host", "GET / HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"head too large", "GET / HTTP/1.1\r\nHost: api\r\nX-Big: " + strings.Repeat("a", h1MaxHeaderBytes) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, m)
			go func() { _, _ = io.WriteString(c, tc.head) }()
			resp, _ := readResp(t, br, http.MethodGet)
			if resp.StatusCode != tc.code || !resp.Close {
				t.Fatalf("status = %d close=%v, want %d and close", resp.StatusCode, resp.Close, tc.code)
			}
		})
	}
	if hits != 0 {
		t.Fatalf("the upstream app saw %d bad requests", hits)
	}
}

// An upstream that answers without reading a large request body gets its
// answer relayed, and the connection is closed rather than parsing the
// rest of the body as requests.
func TestH1EarlyResponseLargeBody(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close") // net/http would otherwise drain up to 256 KiB
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	}))
	c, br := rawConn(t, m)
	size := 32 << 20 // far more than socket buffers and the drain limit hold
	go func() {
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: api\r\nContent-Length: %d\r\n\r\n", size)
		_, _ = c.Write(make([]byte, size))
	}()
	resp, _ := readResp(t, br, http.MethodPost)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413", resp.StatusCode)
	}
	if _, err := io.Copy(io.Discard, br); err != nil && !isConnReset(err) {
		t.Fatalf("connection not closed after an unread large body: %v", err)
	}
}

// A changed listener closes its idle keep-alive HTTP connections (the
// client opens a new one) and serves new connections with the new chain.
func TestH1ChangedListenerClosesIdleConnections(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(echoHead))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "GET /first HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, _ := readResp(t, br, http.MethodGet); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first response = %d close=%v", resp.StatusCode, resp.Close)
	}
	res := maps.Clone(m.webRes)
	res[typeListener] = []types.Resource{upstreamListener("api", m.webPort, hcmFilter(t, "upstream.api.v2", nil, "api"))}
	v := m.cp.set(m.web.cfg.ProxyID, res)
	waitAccepted(t, m.web, typeListener, v)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the idle keep-alive connection of the old listener is still open")
	}
	c2, br2 := rawConn(t, m)
	fmt.Fprint(c2, "GET /second HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, body := readResp(t, br2, http.MethodGet); resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "GET /second") {
		t.Fatalf("second response = %d %q", resp.StatusCode, body)
	}
	if n := statValue(t, m.web, "http.upstream.api.v2.downstream_rq_total"); n != 1 {
		t.Fatalf("new chain served %d requests, want 1", n)
	}
}

func isConnReset(err error) bool {
	return strings.Contains(err.Error(), "reset by peer")
}

// A client that sends part of a request body and waits for the answer
// gets the upstream's early answer at once, then the connection closes:
// the proxy does not wait for the rest of a body nobody will read.
func TestH1EarlyResponseStalledBody(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("connection_close=%v", announce), func(t *testing.T) {
			held := make(chan struct{})
			t.Cleanup(func() { close(held) })
			m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if announce {
					w.Header().Set("Connection", "close")
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = io.WriteString(w, "no")
					return
				}
				// net/http would wait for the rest of a small body before
				// answering: answer on the raw connection and keep it open
				// without reading.
				c, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				defer c.Close()
				_, _ = io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno")
				<-held
			}))
			c, br := rawConn(t, m)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: api\r\nContent-Length: 100000\r\n\r\n0123456789")
			start := time.Now()
			resp, body := readResp(t, br, http.MethodPost)
			if resp.StatusCode != http.StatusUnauthorized || body != "no" {
				t.Fatalf("early answer = %d %q, want 401 \"no\"", resp.StatusCode, body)
			}
			if _, err := io.Copy(io.Discard, br); err != nil && !isConnReset(err) {
				t.Fatalf("connection not closed after the early answer (%s): %v", time.Since(start), err)
			}
		})
	}
}

// The same over HTTP/2 (h2c to the client sidecar): the stream's body is
// closed instead, and the early answer arrives while the stream is open.
func TestH2EarlyResponseStalledBody(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "no")
	}))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() { _, _ = io.WriteString(pw, "0123456789") }() // and no more
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/", m.webPort), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api"
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("no early answer over HTTP/2: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnauthorized || string(b) != "no" {
		t.Fatalf("early answer = HTTP/%d %d %q, want HTTP/2 401 \"no\"", resp.ProtoMajor, resp.StatusCode, b)
	}
}

// An upstream that closes without answering while the client still owes
// part of its body: the client gets the proxy's error at once (the body's
// read is ended), not after sending the rest.
func TestH1UpstreamClosesDuringStalledBody(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close() // no answer
	}))
	c, br := rawConn(t, m)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: api\r\nContent-Length: 100000\r\n\r\n0123456789")
	resp, _ := readResp(t, br, http.MethodPost)
	if resp.StatusCode < 500 {
		t.Fatalf("status = %d, want the proxy's 5xx", resp.StatusCode)
	}
}

// A client that stops reading a response cannot hold its connection (and
// the upstream exchange and buffers behind it) forever: once writing to
// it makes no progress for the stall timeout, the connection is closed.
func TestH1StalledReaderClosed(t *testing.T) {
	shortenStreamIdle(t, 300*time.Millisecond)
	started := make(chan struct{}, 1)
	m := newHTTPMeshRoutes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1024; i++ { // 64 MiB, far more than socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}), func(rc *routev3.RouteConfiguration) {
		rc.VirtualHosts[0].Routes[0].GetRoute().Timeout = durationpb.New(0) // a stream: no route timeout
	})
	c, _ := rawConn(t, m)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: api\r\n\r\n") // and never read
	<-started
	active := "listener." + statName(fmt.Sprintf("127.0.0.1:%d", m.webPort)) + ".downstream_cx_active"
	if n := statValue(t, m.web, active); n != 1 {
		t.Fatalf("%s = %d while the response is being sent, want 1", active, n)
	}
	testutil.WaitFor(t, 10*time.Second, "the non-reading client's connection closed", func() bool {
		return statValue(t, m.web, active) == 0
	})
}

// A client whose request was answered here (no route) while it still owes
// most of the body, and that sends no more of it, cannot hold the
// connection forever: reading the rest of the body to keep the
// connection gives up after the stream idle timeout.
func TestH1LocalReplyStalledBodyClosed(t *testing.T) {
	shortenStreamIdle(t, 300*time.Millisecond)
	m := newHTTPMeshRoutes(t, http.HandlerFunc(echoHead), func(rc *routev3.RouteConfiguration) {
		rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/routed"}
	})
	c, br := rawConn(t, m)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "POST /elsewhere HTTP/1.1\r\nHost: api\r\nContent-Length: 100000\r\n\r\n0123456789") // and no more
	if resp, _ := readResp(t, br, http.MethodPost); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status = %d, want 404", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err != io.EOF && !isConnReset(err) {
		t.Fatalf("connection with a stalled request body still open: %v", err)
	}
}

// Answers without a body (204, and any answer to HEAD) leave their
// upstream connections pooled for the next request, as other answers do.
func TestH1BodilessAnswersReuseUpstream(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/none" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, "body")
	}))
	c, br := rawConn(t, m)
	for _, rq := range []struct{ method, path string }{{"GET", "/none"}, {"HEAD", "/"}, {"GET", "/none"}, {"HEAD", "/"}} {
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: api\r\n\r\n", rq.method, rq.path)
		if resp, _ := readResp(t, br, rq.method); resp.StatusCode >= 300 {
			t.Fatalf("%s %s = %d", rq.method, rq.path, resp.StatusCode)
		}
	}
	for _, p := range []struct {
		proxy   *Proxy
		cluster string
	}{{m.web, sniFor("api")}, {m.api, "local_app"}} {
		if n := statValue(t, p.proxy, "cluster."+p.cluster+".upstream_cx_total"); n != 1 {
			t.Errorf("%s opened %d connections to %s for 4 sequential requests, want 1", p.proxy.cfg.ProxyID, n, p.cluster)
		}
	}
}

// A response finished while its listener drains says "Connection: close"
// (as Envoy's drain does), so the client does not send its next request
// on a connection about to close.
func TestH1DrainAnnouncesClose(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	c, br := rawConn(t, m)
	fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: api\r\n\r\n")
	<-arrived
	res := maps.Clone(m.webRes)
	res[typeListener] = []types.Resource{upstreamListener("api", m.webPort, hcmFilter(t, "upstream.api.v2", nil, "api"))}
	waitAccepted(t, m.web, typeListener, m.cp.set(m.web.cfg.ProxyID, res))
	close(release)
	resp, body := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "done" || !resp.Close {
		t.Fatalf("response during a drain = %d %q close=%v, want 200 %q with Connection: close", resp.StatusCode, body, resp.Close, "done")
	}
}

// shortenStreamIdle sets the downstream stream idle timeout to d for the
// rest of the test.
func shortenStreamIdle(t *testing.T, d time.Duration) {
	old := h1StreamIdle.Swap(int64(d))
	t.Cleanup(func() { h1StreamIdle.Store(old) })
}
