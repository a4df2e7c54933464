package sidecar

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpStats are the HTTP connection manager's counters, http.<stat_prefix>.*.
type httpStats struct {
	rqTotal, noRoute, noCluster, upstreamFail *atomic.Uint64
	rqClass                                   [6]*atomic.Uint64
}

func newHTTPStats(r *statsRegistry, prefix string) *httpStats {
	p := "http." + prefix + "."
	s := &httpStats{
		rqTotal:      r.counter(p + "downstream_rq_total"),
		noRoute:      r.counter(p + "no_route"),
		noCluster:    r.counter(p + "no_cluster"),
		upstreamFail: r.counter(p + "upstream_rq_fail"),
	}
	for i := 1; i <= 5; i++ {
		s.rqClass[i] = r.counter(p + "downstream_rq_" + string(rune('0'+i)) + "xx")
	}
	return s
}

// httpConn is a downstream connection handed to the listener's HTTP server.
// It carries the listener state it was accepted with and runs the
// connection's bookkeeping when the server closes it.
type httpConn struct {
	net.Conn
	state   *listenerState
	once    sync.Once
	onClose func()
}

func (c *httpConn) Close() error {
	c.once.Do(c.onClose) // closes the underlying connection
	return nil
}

type connCtxKey struct{}

// chanListener feeds already-accepted (and authorized) connections to an
// http.Server.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// serveHTTP hands c to the listener's HTTP server, starting it on first use.
// It reports false if the listener is draining (the caller closes c).
func (l *listener) serveHTTP(c *httpConn) bool {
	l.httpOnce.Do(func() {
		l.httpLn = &chanListener{addr: c.LocalAddr(), ch: make(chan net.Conn), done: make(chan struct{})}
		l.httpSrv = &http.Server{
			Handler:           l,
			ReadHeaderTimeout: time.Minute,
			IdleTimeout:       5 * time.Minute,
			ErrorLog:          discardLog,
			ConnContext: func(ctx context.Context, nc net.Conn) context.Context {
				return context.WithValue(ctx, connCtxKey{}, nc)
			},
		}
		go func() { _ = l.httpSrv.Serve(l.httpLn) }()
	})
	if l.httpLn == nil {
		return false
	}
	select {
	case l.httpLn.ch <- c:
		return true
	case <-l.httpLn.done:
		return false
	case <-l.ctx.Done():
		return false
	}
}

// ServeHTTP routes one request: virtual host by Host, route by path and
// headers, then a reverse proxy to the route's cluster.
func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(connCtxKey{}).(*httpConn)
	if c == nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	hc, st := c.state.cfg.chain.http, c.state.httpStats
	st.rqTotal.Add(1)
	if c.state.draining.Load() {
		w.Header().Set("Connection", "close") // finish on a new connection
	}
	rw := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() { st.rqClass[statusClass(rw.status)].Add(1) }()
	rc := hc.routes
	if hc.rdsName != "" {
		rc = l.p.routes.get(hc.rdsName)
	}
	var rt *route
	if rc != nil {
		if vh := rc.selectVirtualHost(r.Host); vh != nil {
			for _, cand := range vh.routes {
				if cand.matches(r.URL.Path, r.Header) {
					rt = cand
					break
				}
			}
		}
	}
	if rt == nil {
		st.noRoute.Add(1)
		rw.WriteHeader(http.StatusNotFound)
		return
	}
	cl := l.p.clusters.get(pickWeighted(rt.clusters))
	if cl == nil {
		st.noCluster.Add(1)
		http.Error(rw, "no healthy upstream", http.StatusServiceUnavailable)
		return
	}
	cl.serveHTTP(rw, r, rt, st)
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// httpFlushInterval is how long response bytes may wait in the downstream
// connection's buffers while the upstream body is still arriving. A response
// that completes sooner goes out in one write at its end; streaming responses
// (unknown length, text/event-stream) are flushed on every write, as
// httputil.ReverseProxy does for them. Flushing every write instead turns
// each small response into several system calls.
const httpFlushInterval = 5 * time.Millisecond

// discardLog swallows net/http's and httputil's own logging (the proxy keeps
// counters instead). Shared: a log.Logger is safe for concurrent use.
var discardLog = log.New(io.Discard, "", 0)

// proxyBufferPool lends the reverse proxy the relay's pooled copy buffers.
type proxyBufferPool struct{}

func (proxyBufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (proxyBufferPool) Put(b []byte) { copyBuffers.Put(&b) }

// serveHTTP proxies r to the cluster, applying the route's prefix rewrite
// and timeout.
func (c *cluster) serveHTTP(w http.ResponseWriter, r *http.Request, rt *route, st *httpStats) {
	ctx := r.Context()
	if rt.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.timeout)
		defer cancel()
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = c.name // replaced by the endpoint in roundTrip
			pr.Out.Host = pr.In.Host
			if rt.prefixRewrite != "" && rt.kind == pathPrefix {
				pr.Out.URL.Path = rt.prefixRewrite + strings.TrimPrefix(pr.In.URL.Path, rt.path)
				pr.Out.URL.RawPath = ""
			}
			pr.SetXForwarded()
		},
		Transport:     roundTripperFunc(c.roundTrip),
		FlushInterval: httpFlushInterval,
		BufferPool:    proxyBufferPool{},
		ErrorLog:      discardLog,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			st.upstreamFail.Add(1)
			code := http.StatusServiceUnavailable
			// The route's deadline passing is a timeout, whichever error
			// the transport reported when it noticed (a cancellation can
			// race the deadline).
			if errors.Is(err, context.DeadlineExceeded) || deadlinePassed(req.Context()) {
				code = http.StatusGatewayTimeout
			}
			http.Error(w, "upstream connect error or disconnect/reset before headers", code)
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends req to one endpoint per attempt, failing over to the next
// when the connection cannot be opened (nothing was sent yet). req is the
// reverse proxy's own outbound request, so it is retargeted in place rather
// than cloned per attempt.
func (c *cluster) roundTrip(req *http.Request) (*http.Response, error) {
	st := c.state.Load()
	if st == nil {
		return nil, ErrNoHealthyUpstream
	}
	cands := c.candidates(st)
	if len(cands) == 0 {
		c.stats.cxNoneHealthy.Add(1)
		return nil, ErrNoHealthyUpstream
	}
	if body := req.Body; body != nil && body != http.NoBody {
		// A failed attempt must not close the body the next one sends.
		defer body.Close()
		req.Body = io.NopCloser(body)
	}
	var lastErr error
	for _, h := range cands {
		req.URL.Host = h.ep.addr
		c.stats.rqTotal.Add(1)
		h.stats.rqTotal.Add(1)
		h.stats.rqActive.Add(1)
		resp, err := c.transport.RoundTrip(req)
		h.stats.rqActive.Add(-1)
		if err != nil {
			lastErr = err
			var ce *connectError
			if errors.As(err, &ce) && req.Context().Err() == nil {
				continue
			}
			h.stats.rqError.Add(1)
			if errors.Is(err, context.DeadlineExceeded) {
				h.stats.rqTimeout.Add(1)
			}
			return nil, err
		}
		c.stats.rqClass[statusClass(resp.StatusCode)].Add(1)
		if resp.StatusCode >= 500 {
			h.stats.rqError.Add(1)
		} else {
			h.stats.rqSuccess.Add(1)
		}
		return resp, nil
	}
	return nil, lastErr
}

// statusClass maps an HTTP status to its stats index 1..5.
func statusClass(code int) int { return max(1, min(code/100, 5)) }

// deadlinePassed reports whether ctx has a deadline that is already past.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
