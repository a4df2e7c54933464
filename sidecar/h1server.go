package sidecar

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Downstream HTTP/1.1 limits (net/http's server defaults).
const (
	h1IdleTimeout     = 5 * time.Minute
	h1MaxHeaderBytes  = 1<<20 + 4096
	h1MaxDrainBody    = 256 << 10 // unread request body discarded to keep a connection
	h1BufferSize      = 4 << 10
	h1DeadlineRearmed = h1IdleTimeout / 5
)

// h1StreamIdle is how long a downstream HTTP/1.1 client may hold a
// request without progress, a write to it or the read of a request body
// nobody else waits for, before the connection is closed (Envoy's
// default stream_idle_timeout); in nanoseconds, 0 for h1IdleTimeout.
// Atomic so a test can shorten it while other tests' proxies run.
var h1StreamIdle atomic.Int64

func streamIdle() time.Duration {
	if d := h1StreamIdle.Load(); d > 0 {
		return time.Duration(d)
	}
	return h1IdleTimeout
}

var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, h1BufferSize) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, h1BufferSize) }}

	errHeadTooLarge = errors.New("request head too large")
)

// h1conn is one downstream HTTP/1.1 connection of an HTTP connection
// manager. Its requests are read, routed, proxied and answered one after
// another on the goroutine that accepted the connection: no per-request
// goroutine, no background read, and a small response goes out with one
// write together with its head. Only drain touches it from elsewhere
// (closing it while idle).
type h1conn struct {
	l    *listener
	c    *httpConn
	lim  headLimitReader
	br   *bufio.Reader
	bw   *bufio.Writer
	sw   stallWriter // under bw
	idle atomic.Bool // waiting for the next request
	// bodyAborted is set when an exchange ended the read of the
	// request's body (see bodyWrite.end): the rest is not waited for.
	bodyAborted atomic.Bool
	armed       time.Time                   // when the idle read deadline was last pushed out
	client      string                      // downstream IP, for X-Forwarded-For
	proto       string                      // X-Forwarded-Proto
	peer        *authzPeer                  // HTTP ext_authz identity, computed on first use
	h2srv       atomic.Pointer[http.Server] // set while serving HTTP/2
	h2Idle      time.Duration               // the HTTP/2 streams' idle timeout
	rctx        reqContext                  // the HTTP/1.1 requests' context
	// scratch is reused by the requests readRequest parses itself, exch
	// by the upstream exchanges of every request.
	scratch reqScratch
	exch    exchScratch
	// owned backs the header values outbound sets on the HTTP/1.1 path,
	// reused from request to request (see setOwned).
	owned [ownedHeaders]string
}

// The header values outbound sets from h1conn.owned.
const (
	ownedUserAgent = iota
	ownedXFF
	ownedXFHost
	ownedXFProto
	ownedHeaders
)

// setOwned sets header k to the single value v, stored in own[i] when own
// is set: no slice per request. The slice's capacity is capped at one, so
// an Add elsewhere copies it instead of writing into own. Only the HTTP/1.1
// path passes h.owned: its requests run one at a time and are done with
// (written upstream) before the connection reads the next; HTTP/2 streams
// run concurrently and pass nil.
func setOwned(own *[ownedHeaders]string, hd http.Header, i int, k, v string) {
	if own == nil {
		hd[k] = []string{v}
		return
	}
	own[i] = v
	hd[k] = own[i : i+1 : i+1]
}

// serveHTTP runs the HTTP connection manager on c until the connection
// ends, and closes it. It reports false, without serving, if the listener
// is already draining (the caller closes c).
func (l *listener) serveHTTP(c *httpConn) bool {
	st := c.state
	if st.draining.Load() || l.ctx.Err() != nil {
		return false
	}
	h := &h1conn{l: l, c: c, proto: "http", rctx: reqContext{parent: l.ctx}}
	if _, ok := c.Conn.(*tls.Conn); ok {
		h.proto = "https"
	}
	if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		h.client = host
	}
	h.lim = headLimitReader{r: c.Conn, n: -1, scan: &h.scratch.scan}
	h.br = h1Readers.Get().(*bufio.Reader)
	h.br.Reset(&h.lim)
	h.bw = h1Writers.Get().(*bufio.Writer)
	h.sw.c = c.Conn
	h.bw.Reset(&h.sw)
	h.exch.abortRead = func() {
		h.bodyAborted.Store(true)
		_ = c.SetReadDeadline(time.Unix(1, 0))
	}
	st.httpConns.Store(h, struct{}{})
	defer func() {
		h.rctx.close()
		st.httpConns.Delete(h)
		c.Close()
		h.br.Reset(nil)
		h1Readers.Put(h.br)
		h.bw.Reset(nil)
		h1Writers.Put(h.bw)
	}()
	if h.isH2Preface() {
		h.serveH2()
		return true
	}
	for h.serveOne() {
	}
	return true
}

// closeIfIdle closes the connection if it is waiting for a request (drain).
func (h *h1conn) closeIfIdle() {
	if srv := h.h2srv.Load(); srv != nil {
		// HTTP/2: GOAWAY, let open streams finish, then close (the
		// drain timeout still bounds it).
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), h.l.p.cfg.DrainTimeout)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}()
		return
	}
	if h.idle.Load() {
		h.c.Conn.Close()
	}
}

// waitRequest waits for the first byte of the next request. It reports
// false when the connection ended, idled out or the listener is draining.
func (h *h1conn) waitRequest() bool {
	h.idle.Store(true)
	defer h.idle.Store(false)
	if h.c.state.draining.Load() {
		return false
	}
	if now := time.Now(); now.Sub(h.armed) > h1DeadlineRearmed {
		_ = h.c.SetReadDeadline(now.Add(h1IdleTimeout))
		h.armed = now
	}
	_, err := h.br.Peek(1)
	return err == nil
}

// serveOne serves one request and reports whether the connection stays
// open for another.
func (h *h1conn) serveOne() bool {
	if h.lim.n < 0 {
		h.lim.n = h1MaxHeaderBytes
	}
	if !h.waitRequest() {
		return false
	}
	h.scratch.setContext(h.rctx.current())
	req, err := readRequest(h.br, &h.scratch)
	h.lim.n = -1
	h.c.state.httpStats.rqTotal.Add(1)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, errHeadTooLarge) {
			code = http.StatusRequestHeaderFieldsTooLarge
		}
		h.localReply(nil, code, "", false)
		return false
	}
	keep := !req.Close && !h.c.state.draining.Load()
	if req.ProtoMajor != 1 {
		h.localReply(req, http.StatusHTTPVersionNotSupported, "", false)
		return false
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" {
		h.localReply(req, http.StatusBadRequest, "missing required Host header", false)
		return false
	}
	if req.Body != http.NoBody || upgradeType(req.Header) != "" {
		// Bodies and upgraded streams may take longer than the idle timeout.
		_ = h.c.SetReadDeadline(time.Time{})
		h.armed = time.Time{}
	}
	body := req.Body
	if body != http.NoBody {
		req.Body = keepOpenBody{body}
		h.bodyAborted.Store(false)
	}
	if keep = h.route(req, keep); !keep {
		return false
	}
	return h.finishBody(body)
}

// finishBody reads what the upstream left of the request body, so the next
// request can be parsed; a large remainder closes the connection instead.
func (h *h1conn) finishBody(body io.ReadCloser) bool {
	if body == http.NoBody {
		return true
	}
	if !h.bodyAborted.Load() {
		// Nothing else bounds this read (an answer made here, or an
		// upstream that left part of the body): a client that stopped
		// sending it must not hold the connection.
		_ = h.c.SetReadDeadline(time.Now().Add(streamIdle()))
	}
	_, err := io.CopyN(io.Discard, body, h1MaxDrainBody)
	return err == io.EOF
}

// outbound turns the downstream request into the upstream one in place:
// path rewrite, hop-by-hop headers dropped, X-Forwarded-* set. It returns
// the requested protocol upgrade, if any. own backs the values it sets
// (nil: allocated; see setOwned).
func (h *h1conn) outbound(req *http.Request, rt *route, own *[ownedHeaders]string) string {
	if rt.prefixRewrite != "" && rt.kind != pathRegex && len(req.URL.Path) >= len(rt.path) {
		// The matched prefix (or exact path, matched case-insensitively
		// perhaps) is swapped for the rewrite; Envoy keeps the original.
		req.Header.Set("X-Envoy-Original-Path", req.URL.RequestURI())
		req.URL.Path = rt.prefixRewrite + req.URL.Path[len(rt.path):]
		req.URL.RawPath = ""
	}
	upgrade := requestedUpgrade(req.Header)
	te := req.Header.Get("Te")
	removeHopHeaders(req.Header)
	if upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	}
	if strings.EqualFold(te, "trailers") {
		req.Header.Set("Te", "trailers")
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		setOwned(own, req.Header, ownedUserAgent, "User-Agent", "") // no Go default added
	}
	if h.client != "" {
		setOwned(own, req.Header, ownedXFF, "X-Forwarded-For", appendForwardedFor(req.Header["X-Forwarded-For"], h.client))
	}
	setOwned(own, req.Header, ownedXFHost, "X-Forwarded-Host", req.Host)
	setOwned(own, req.Header, ownedXFProto, "X-Forwarded-Proto", h.proto)
	req.URL.Scheme = "http"
	req.URL.Host = ""
	req.RequestURI = ""
	req.Close = false
	return upgrade
}

// appendForwardedFor is the X-Forwarded-For value with client appended to
// the prior values (one string built, none when there are no prior ones).
func appendForwardedFor(prior []string, client string) string {
	if len(prior) == 0 {
		return client
	}
	n := len(client)
	for _, p := range prior {
		n += len(p) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range prior {
		b.WriteString(p)
		b.WriteString(", ")
	}
	b.WriteString(client)
	return b.String()
}

// stallWriter writes to a downstream connection with a write deadline
// h1StreamIdle ahead, pushed out (at most every fifth of it) as writes
// go on: a client that stops reading cannot hold its connection, the
// upstream exchange and their buffers forever.
type stallWriter struct {
	c     net.Conn
	armed time.Time
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if now, idle := time.Now(), streamIdle(); now.Sub(w.armed) > idle/5 {
		_ = w.c.SetWriteDeadline(now.Add(idle))
		w.armed = now
	}
	return w.c.Write(p)
}

// keepOpenBody hides Close from the transport: the connection manager
// decides what happens to an unread request body.
type keepOpenBody struct{ io.ReadCloser }

func (keepOpenBody) Close() error { return nil }

// headLimitReader caps what a request head may read from the connection;
// n < 0 means no cap.
type headLimitReader struct {
	r    io.Reader
	n    int64
	scan *framingScan // fed what is read while it is active
}

func (l *headLimitReader) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	if l.scan != nil && l.scan.active {
		l.scan.feed(p[:n])
	}
	return n, err
}

// hopHeaders are the hop-by-hop headers a proxy removes (RFC 9110 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders deletes the hop-by-hop headers and those the Connection
// header names.
func removeHopHeaders(hd http.Header) {
	for _, v := range hd["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				hd.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(hd, name)
	}
}

// requestedUpgrade is the protocol a request asks to switch to, if it is
// to be relayed: h2c is stripped, as Envoy does (the switch would hand the
// client a raw HTTP/2 connection to the upstream, past per-request routing
// and authorization), and the request then goes on as a plain one.
func requestedUpgrade(hd http.Header) string {
	upgrade := upgradeType(hd)
	if strings.EqualFold(upgrade, "h2c") {
		return ""
	}
	return upgrade
}

// upgradeType is the protocol a request or response asks to switch to.
func upgradeType(hd http.Header) string {
	for _, v := range hd["Connection"] {
		for v != "" {
			var name string
			name, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(name), "upgrade") {
				return hd.Get("Upgrade")
			}
		}
	}
	return ""
}

// statusLine writes "HTTP/1.1 <code> <text>\r\n".
func statusLine(bw *bufio.Writer, code int, status string) {
	_, _ = bw.WriteString("HTTP/1.1 ")
	if code >= 100 && code <= 999 { // three digits, without a string per response
		for _, d := range [3]int{code / 100, code / 10 % 10, code % 10} {
			_ = bw.WriteByte(byte('0' + d))
		}
	} else {
		_, _ = bw.WriteString(strconv.Itoa(code))
	}
	_ = bw.WriteByte(' ')
	text := ""
	if len(status) > 4 && status[3] == ' ' && parseStatus(status[:3]) == code {
		text = status[4:]
	}
	if text == "" {
		text = http.StatusText(code)
	}
	_, _ = bw.WriteString(text)
	_, _ = bw.WriteString("\r\n")
}

// parseStatus is the value of a three-digit status code, -1 if s is not
// three digits.
func parseStatus(s string) int {
	if len(s) != 3 {
		return -1
	}
	n := 0
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// keepOpen is whether a response may leave the connection open: keep,
// unless the listener started draining while the request ran (the
// response then says "Connection: close", as Envoy's drain does).
func (h *h1conn) keepOpen(keep bool) bool {
	return keep && !h.c.state.draining.Load()
}

// localReply answers with a short plain-text response made here (no route,
// no upstream, timeout, bad request) and reports whether the connection
// stays open.
func (h *h1conn) localReply(req *http.Request, code int, msg string, keep bool) bool {
	keep = h.keepOpen(keep)
	h.c.state.httpStats.rqClass[statusClass(code)].Add(1)
	if msg != "" {
		msg += "\n"
	}
	statusLine(h.bw, code, "")
	if msg != "" {
		_, _ = h.bw.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n")
	}
	_, _ = h.bw.WriteString("Content-Length: " + strconv.Itoa(len(msg)) + "\r\n")
	if !keep {
		_, _ = h.bw.WriteString("Connection: close\r\n")
	}
	_, _ = h.bw.WriteString("\r\n")
	if req == nil || req.Method != http.MethodHead {
		_, _ = h.bw.WriteString(msg)
	}
	return h.bw.Flush() == nil && keep
}
