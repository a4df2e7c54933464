package sidecar

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// h2Preface is the client connection preface of HTTP/2 (RFC 9113 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// isH2Preface reports whether the connection starts with the HTTP/2
// preface (prior knowledge h2c, or h2 over TLS), as Envoy's AUTO codec
// decides. It reads byte by byte only while the preface still matches, so
// a short HTTP/1.x request never waits for bytes that will not come.
func (h *h1conn) isH2Preface() bool {
	h.lim.n = h1MaxHeaderBytes // what is read here counts towards the first head
	now := time.Now()
	_ = h.c.SetReadDeadline(now.Add(h1IdleTimeout))
	h.armed = now
	h.idle.Store(true) // a drain may close a connection that sent nothing
	_, err := h.br.Peek(1)
	h.idle.Store(false)
	if err != nil {
		return false
	}
	for n := 1; n <= len(h2Preface); n++ {
		b, err := h.br.Peek(n)
		if err != nil || b[n-1] != h2Preface[n-1] {
			return false
		}
	}
	return true
}

// bufConn reads through the connection's buffered reader (which holds the
// preface already peeked) and writes through a stallWriter: a connection
// whose writes make no progress for the stream idle timeout fails them,
// and the HTTP/2 server then closes it (its streams could not even be
// reset, the RST_STREAM frames queued behind the stuck write).
type bufConn struct {
	net.Conn
	r *bufio.Reader
	w *stallWriter
}

func (c *bufConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *bufConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// serveH2 serves an HTTP/2 connection: every stream is routed and proxied
// like an HTTP/1.1 request, on its own goroutine (net/http's HTTP/2
// server, with prior knowledge over the connection, TLS or not).
func (h *h1conn) serveH2() {
	h.lim.n = -1
	_ = h.c.SetReadDeadline(time.Time{})
	if hc := h.c.state.cfg.chain.http; hc.authz != nil {
		h.authzPeerInfo(hc.authz.includePeerCert) // before streams share h
	}
	ln := &oneConnListener{c: &bufConn{Conn: h.c, r: h.br, w: &h.sw}, done: make(chan struct{})}
	connDone := make(chan struct{})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h.h2Idle = streamIdle()
	srv := &http.Server{
		Handler:     http.HandlerFunc(h.serveStream),
		Protocols:   &protos,
		IdleTimeout: h1IdleTimeout,
		// Every stream opens with a write deadline the stream idle
		// timeout ahead (HTTP/2 arms it per stream), pushed out as the
		// stream makes progress (see streamIdler).
		WriteTimeout: h.h2Idle,
		BaseContext:  func(net.Listener) context.Context { return h.l.ctx },
		ErrorLog:     log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.Close()
				close(connDone)
			}
		},
	}
	h.h2srv.Store(srv)
	if h.c.state.draining.Load() {
		return // the drain started before this connection was served
	}
	_ = srv.Serve(ln)
	if !ln.took {
		return // shut down before the connection was accepted
	}
	<-connDone // the connection's streams are done with h
}

// oneConnListener hands one connection to an http.Server, then blocks
// until closed.
type oneConnListener struct {
	c    net.Conn
	once sync.Once
	took bool
	done chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.took {
		l.took = true
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// serveStream is one HTTP/2 request: ext_authz, route, cluster, proxy.
func (h *h1conn) serveStream(w http.ResponseWriter, req *http.Request) {
	l, st := h.l, h.c.state.httpStats
	idler := newStreamIdler(w, h.h2Idle)
	st.rqTotal.Add(1)
	hc := h.c.state.cfg.chain.http
	if hasFragment(req) {
		h.h2Reply(w, http.StatusBadRequest, nil, "")
		return
	}
	if hc.norm.active() {
		switch hc.norm.apply(req) {
		case pathReject:
			h.h2Reply(w, http.StatusBadRequest, nil, "")
			return
		case pathRedirect:
			h.h2Reply(w, http.StatusTemporaryRedirect, http.Header{"Location": {req.URL.RequestURI()}}, "")
			return
		}
	}
	if hc.authz != nil {
		if v := h.checkHTTP(req, hc.authz); !v.allow {
			h.h2Reply(w, v.code, v.hdr, v.body)
			return
		}
	}
	rc := hc.routes
	if hc.rdsName != "" {
		rc = l.p.routes.wait(req.Context(), hc.rdsName, routeWaitTimeout)
	}
	rt := rc.match(&reqView{req: req, scheme: h.proto})
	if rt == nil {
		st.noRoute.Add(1)
		h.h2Reply(w, http.StatusNotFound, nil, "")
		return
	}
	wc := &rt.clusters[pickIndex(rt.clusters)]
	cl := l.p.clusters.get(wc.name)
	if cl == nil {
		st.noCluster.Add(1)
		h.h2Reply(w, http.StatusServiceUnavailable, nil, "no healthy upstream\n")
		return
	}
	ctx := req.Context()
	if rt.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.timeout)
		defer cancel()
	}
	out := req.Clone(ctx)
	if req.Body == nil || req.ContentLength == 0 {
		// A stream that ended with its headers (GET) has no body: the
		// request stays replayable for retries.
		out.Body = http.NoBody
	} else {
		out.Body = &idleBody{ReadCloser: out.Body, idler: idler}
	}
	lbc := h.lbContext(out, rt, cl)
	h.outbound(out, rt, nil) // streams run concurrently: no shared value storage
	if wc.hdrs != nil {
		wc.hdrs.req.apply(out.Header)
	}
	rt.reqHeaders.apply(out.Header)
	resp, err := sendWithRetries(out, rt.retry, cl, lbc, nil)
	if err != nil {
		st.upstreamFail.Add(1)
		if errors.Is(err, ErrOverflow) {
			h.h2Reply(w, http.StatusServiceUnavailable, http.Header{overloadedHeader: {"true"}}, overflowBody)
			return
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errPerTryTimeout) || deadlinePassed(ctx) {
			cl.stats.rqTimeout.Add(1)
			h.h2Reply(w, http.StatusGatewayTimeout, nil, "upstream request timeout\n")
			return
		}
		h.h2Reply(w, http.StatusServiceUnavailable, nil, "upstream connect error or disconnect/reset before headers\n")
		return
	}
	defer resp.Body.Close()
	if wc.hdrs != nil {
		wc.hdrs.resp.apply(resp.Header)
	}
	rt.respHeaders.apply(resp.Header)
	if lbc.setCookie != "" {
		resp.Header.Add("Set-Cookie", lbc.setCookie)
	}
	h.h2Relay(w, resp, idler)
}

// h2Relay streams an upstream response to an HTTP/2 stream: head, body
// (flushed as it arrives, for gRPC streams) and trailers.
func (h *h1conn) h2Relay(w http.ResponseWriter, resp *http.Response, idler *streamIdler) {
	h.c.state.httpStats.rqClass[statusClass(resp.StatusCode)].Add(1)
	removeHopHeaders(resp.Header)
	dst := w.Header()
	for k, vv := range resp.Header {
		dst[k] = vv
	}
	if resp.ContentLength < 0 {
		dst.Del("Content-Length")
	}
	idler.touch() // the upstream's answer is progress too
	w.WriteHeader(resp.StatusCode)
	rc := idler.rc
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			idler.touch()
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			// The upstream reset mid-body: reset the stream too.
			panic(http.ErrAbortHandler)
		}
	}
	for k, vv := range resp.Trailer {
		dst[http.TrailerPrefix+k] = vv
	}
}

// h2Reply answers a stream with a response made here.
func (h *h1conn) h2Reply(w http.ResponseWriter, code int, hdr http.Header, body string) {
	h.c.state.httpStats.rqClass[statusClass(code)].Add(1)
	dst := w.Header()
	for k, vv := range hdr {
		if !strings.EqualFold(k, "Content-Length") {
			dst[k] = vv
		}
	}
	if body != "" && dst.Get("Content-Type") == "" {
		dst.Set("Content-Type", "text/plain")
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// streamIdler resets an HTTP/2 stream that makes no progress for the
// stream idle timeout, as Envoy's stream_idle_timeout does: the write
// deadline the server armed when the stream opened (WriteTimeout) is
// pushed out as request body or response bytes pass, at most every fifth
// of the timeout (each push is a message to the connection's serve loop).
// A stream reset by its deadline fails its handler's writes and cancels
// its request, which releases the upstream exchange: a client that stops
// reading (never opens its flow-control window) cannot hold it forever.
type streamIdler struct {
	rc    *http.ResponseController
	idle  time.Duration
	armed atomic.Int64 // when the deadline was last set, in Unix nanoseconds
}

func newStreamIdler(w http.ResponseWriter, idle time.Duration) *streamIdler {
	s := &streamIdler{rc: http.NewResponseController(w), idle: idle}
	s.armed.Store(time.Now().UnixNano())
	return s
}

// touch records progress; the request body's reader and the response's
// writer may call it at once.
func (s *streamIdler) touch() {
	now := time.Now()
	last := s.armed.Load()
	if now.UnixNano()-last <= int64(s.idle/5) || !s.armed.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_ = s.rc.SetWriteDeadline(now.Add(s.idle))
}

// idleBody is an HTTP/2 request body whose reads count as the stream's
// progress (a client streaming its request keeps the stream alive).
type idleBody struct {
	io.ReadCloser
	idler *streamIdler
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.idler.touch()
	}
	return n, err
}
