package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// defaultCircuitLimit is Envoy's default for every circuit breaker
// threshold (max_connections, max_pending_requests, max_requests).
const defaultCircuitLimit = 1024

// defaultMaxRetries is Envoy's default max_retries: retries in flight to
// a cluster at once.
const defaultMaxRetries = 3

// ErrOverflow: a cluster's circuit breaker is open (too many connections,
// pending or active requests). HTTP answers 503 with x-envoy-overloaded.
var ErrOverflow = errors.New("upstream overflow")

// overloadedHeader marks a local reply caused by a circuit breaker, as
// Envoy does.
const overloadedHeader = "X-Envoy-Overloaded"

// thresholds are a cluster's circuit breaker limits (priority DEFAULT).
type thresholds struct {
	maxConns    int64 // open connections to the cluster
	maxPending  int64 // requests waiting for a connection
	maxRequests int64 // requests in flight
	maxRetries  int64 // retries in flight
}

// defaultThresholds are Envoy's limits for a cluster that sets none.
var defaultThresholds = thresholds{defaultCircuitLimit, defaultCircuitLimit, defaultCircuitLimit, defaultMaxRetries}

// decodeCircuitBreakers reads the DEFAULT priority thresholds; unset
// values (and a cluster without circuit_breakers) are Envoy's defaults
// (1024, and 3 for max_retries).
func decodeCircuitBreakers(cb *clusterv3.CircuitBreakers) thresholds {
	t := defaultThresholds
	for _, th := range cb.GetThresholds() {
		if th.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue // no route asks for HIGH priority
		}
		if v := th.GetMaxConnections(); v != nil {
			t.maxConns = int64(v.GetValue())
		}
		if v := th.GetMaxPendingRequests(); v != nil {
			t.maxPending = int64(v.GetValue())
		}
		if v := th.GetMaxRequests(); v != nil {
			t.maxRequests = int64(v.GetValue())
		}
		if v := th.GetMaxRetries(); v != nil {
			t.maxRetries = int64(v.GetValue())
		}
	}
	return t
}

// circuit is a cluster's circuit breaker state: connections, requests
// waiting for one, requests in flight, checked against the thresholds
// of the cluster's current config.
type circuit struct {
	limits atomic.Pointer[thresholds]

	mu      sync.Mutex
	conns   int64
	pending int64
	wake    chan struct{} // closed when a connection is released or pooled

	requests atomic.Int64
	retries  atomic.Int64

	cxOverflow, rqPendingOverflow, rqRetryOverflow *atomic.Uint64
	rqActive, rqPendingActive                      *atomic.Int64
	// Envoy's circuit_breakers.default.*_open gauges.
	cxOpen, rqOpen, rqPendingOpen, rqRetryOpen *atomic.Int64
}

func newCircuit(reg *statsRegistry, name string) *circuit {
	p := "cluster." + name + "."
	c := &circuit{
		cxOverflow:        reg.counter(p + "upstream_cx_overflow"),
		rqPendingOverflow: reg.counter(p + "upstream_rq_pending_overflow"),
		rqRetryOverflow:   reg.counter(p + "upstream_rq_retry_overflow"),
		rqActive:          reg.gauge(p + "upstream_rq_active"),
		rqPendingActive:   reg.gauge(p + "upstream_rq_pending_active"),
		cxOpen:            reg.gauge(p + "circuit_breakers.default.cx_open"),
		rqOpen:            reg.gauge(p + "circuit_breakers.default.rq_open"),
		rqPendingOpen:     reg.gauge(p + "circuit_breakers.default.rq_pending_open"),
		rqRetryOpen:       reg.gauge(p + "circuit_breakers.default.rq_retry_open"),
	}
	c.setLimits(defaultThresholds)
	return c
}

func (c *circuit) setLimits(t thresholds) { c.limits.Store(&t) }

func boolGauge(g *atomic.Int64, open bool) {
	if open {
		g.Store(1)
	} else {
		g.Store(0)
	}
}

// acquireConn counts a new connection, false when max_connections are open.
func (c *circuit) acquireConn() bool {
	limit := c.limits.Load().maxConns
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns >= limit {
		c.cxOverflow.Add(1)
		boolGauge(c.cxOpen, true)
		return false
	}
	c.conns++
	boolGauge(c.cxOpen, c.conns >= limit)
	return true
}

// releaseConn uncounts a closed connection and wakes pending requests.
func (c *circuit) releaseConn() {
	c.mu.Lock()
	c.conns--
	boolGauge(c.cxOpen, c.conns >= c.limits.Load().maxConns)
	c.wakeLocked()
	c.mu.Unlock()
}

// pooled wakes pending requests: an idle connection is available.
func (c *circuit) pooled() {
	c.mu.Lock()
	c.wakeLocked()
	c.mu.Unlock()
}

func (c *circuit) wakeLocked() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// waitCh is closed at the next release or pooling: take it before trying
// to connect so that no wake-up is missed.
func (c *circuit) waitCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.wake
}

// enterPending counts a request waiting for a connection; false (an
// overflow) when max_pending_requests are already waiting.
func (c *circuit) enterPending() bool {
	limit := c.limits.Load().maxPending
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending >= limit {
		c.rqPendingOverflow.Add(1)
		boolGauge(c.rqPendingOpen, true)
		return false
	}
	c.pending++
	c.rqPendingActive.Store(c.pending)
	boolGauge(c.rqPendingOpen, c.pending >= limit)
	return true
}

func (c *circuit) leavePending() {
	c.mu.Lock()
	c.pending--
	c.rqPendingActive.Store(c.pending)
	boolGauge(c.rqPendingOpen, c.pending >= c.limits.Load().maxPending)
	c.mu.Unlock()
}

// acquireRequest counts a request in flight; false (an overflow) when
// max_requests are.
func (c *circuit) acquireRequest() bool {
	limit := c.limits.Load().maxRequests
	for {
		n := c.requests.Load()
		if n >= limit {
			c.rqPendingOverflow.Add(1)
			boolGauge(c.rqOpen, true)
			return false
		}
		if c.requests.CompareAndSwap(n, n+1) {
			c.rqActive.Store(n + 1)
			boolGauge(c.rqOpen, n+1 >= limit)
			return true
		}
	}
}

func (c *circuit) releaseRequest() {
	n := c.requests.Add(-1)
	c.rqActive.Store(n)
	boolGauge(c.rqOpen, n >= c.limits.Load().maxRequests)
}

// acquireRetry counts a retry about to be scheduled; false (an overflow:
// the failed attempt's answer stands) when max_retries are in flight.
func (c *circuit) acquireRetry() bool {
	limit := c.limits.Load().maxRetries
	for {
		n := c.retries.Load()
		if n >= limit {
			c.rqRetryOverflow.Add(1)
			boolGauge(c.rqRetryOpen, true)
			return false
		}
		if c.retries.CompareAndSwap(n, n+1) {
			boolGauge(c.rqRetryOpen, n+1 >= limit)
			return true
		}
	}
}

// releaseRetry uncounts a retry whose attempt is over.
func (c *circuit) releaseRetry() {
	n := c.retries.Add(-1)
	boolGauge(c.rqRetryOpen, n >= c.limits.Load().maxRetries)
}

// overflowError says which limit was hit; it wraps ErrOverflow.
func overflowError(what string, limit int64) error {
	return fmt.Errorf("%w: %s (%d) reached", ErrOverflow, what, limit)
}

// requestBody releases a request's max_requests slot once its response
// body is read to the end or closed.
type requestBody struct {
	io.ReadCloser
	cb       *circuit
	released atomic.Bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *requestBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

func (b *requestBody) release() {
	if b.released.CompareAndSwap(false, true) {
		b.cb.releaseRequest()
	}
}

// dialLimited dials addr; at the cluster's max_connections it first closes
// an idle connection to another endpoint, else waits as a pending request
// (at most max_pending_requests of them) until a connection is pooled or
// closed, then returns (nil, nil) for the caller to look at the pool again.
func (t *h1Transport) dialLimited(ctx context.Context, addr string) (net.Conn, error) {
	for {
		var wake <-chan struct{}
		if t.cb != nil {
			wake = t.cb.waitCh()
		}
		c, err := t.dial(ctx, addr)
		if err == nil || t.cb == nil || !errors.Is(err, ErrOverflow) {
			return c, err
		}
		if t.closeOneIdle(addr) {
			continue
		}
		if !t.cb.enterPending() {
			return nil, overflowError("max_pending_requests", t.cb.limits.Load().maxPending)
		}
		select {
		case <-wake:
		case <-ctx.Done():
		}
		t.cb.leavePending()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for an upstream connection: %w", ctx.Err())
		}
		return nil, nil
	}
}

// closeOneIdle closes one idle connection to an endpoint other than addr,
// freeing a max_connections slot; false if there is none.
func (t *h1Transport) closeOneIdle(addr string) bool {
	t.mu.Lock()
	var victim *upstreamConn
	for a, list := range t.idle {
		if a == addr || len(list) == 0 {
			continue
		}
		victim = list[0]
		if len(list) == 1 {
			delete(t.idle, a)
		} else {
			t.idle[a] = list[1:]
		}
		break
	}
	t.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.conn.Close()
	return true
}

// overflowBody is the local reply's body, Envoy's wording.
const overflowBody = "upstream connect error or disconnect/reset before headers. reset reason: overflow\n"

// overloadedReply answers 503 with x-envoy-overloaded: true, as Envoy does
// when a circuit breaker refuses a request.
func (h *h1conn) overloadedReply(req *http.Request, keep bool) bool {
	keep = h.keepOpen(keep)
	h.c.state.httpStats.rqClass[5].Add(1)
	statusLine(h.bw, http.StatusServiceUnavailable, "")
	_, _ = h.bw.WriteString(overloadedHeader + ": true\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + strconv.Itoa(len(overflowBody)) + "\r\n")
	if !keep {
		_, _ = h.bw.WriteString("Connection: close\r\n")
	}
	_, _ = h.bw.WriteString("\r\n")
	if req == nil || req.Method != http.MethodHead {
		_, _ = h.bw.WriteString(overflowBody)
	}
	return h.bw.Flush() == nil && keep
}
