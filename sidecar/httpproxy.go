package sidecar

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// httpStats are the HTTP connection manager's counters, http.<stat_prefix>.*.
type httpStats struct {
	rqTotal, noRoute, noCluster, upstreamFail *atomic.Uint64
	rqClass                                   [6]*atomic.Uint64
	upgradeRefused                            *atomic.Uint64 // an upgrade type not configured
	// HTTP ext_authz filter: http.<stat_prefix>.ext_authz.*.
	authzOK, authzDenied, authzError, authzFailureModeAllowed *atomic.Uint64
	authzCacheHit                                             *atomic.Uint64 // answered from authzCache
}

func newHTTPStats(r *statsRegistry, prefix string) *httpStats {
	p := "http." + prefix + "."
	s := &httpStats{
		rqTotal:      r.counter(p + "downstream_rq_total"),
		noRoute:      r.counter(p + "no_route"),
		noCluster:    r.counter(p + "no_cluster"),
		upstreamFail: r.counter(p + "upstream_rq_fail"),
		// Envoy's name, though it counts every refused upgrade type.
		upgradeRefused: r.counter(p + "downstream_rq_ws_on_non_ws_route"),

		authzOK:                 r.counter(p + "ext_authz.ok"),
		authzDenied:             r.counter(p + "ext_authz.denied"),
		authzError:              r.counter(p + "ext_authz.error"),
		authzFailureModeAllowed: r.counter(p + "ext_authz.failure_mode_allowed"),
		authzCacheHit:           r.counter(p + "ext_authz.cache_hit"),
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

// roundTrip sends req to one endpoint per attempt, failing over to the next
// when the connection cannot be opened (nothing was sent yet, so a request
// body is untouched). Endpoints in tried (earlier attempts of a retried
// request) are tried last, and every endpoint used is added to it. req
// is the connection manager's own outbound request, so it is retargeted in
// place rather than cloned per attempt; its body's Close is the caller's
// concern (h1conn passes one that ignores it). The response is read into
// xs when set.
func (c *cluster) roundTrip(req *http.Request, lbc lbContext, tried *triedHosts, xs *exchScratch) (*http.Response, error) {
	st := c.state.Load()
	if st == nil {
		return nil, ErrNoHealthyUpstream
	}
	var buf [maxConnectAttempts]*host
	cands := c.candidatesInto(buf[:0], st, lbc, tried.list())
	if len(cands) == 0 {
		c.stats.cxNoneHealthy.Add(1)
		return nil, ErrNoHealthyUpstream
	}
	if !c.cb.acquireRequest() {
		return nil, overflowError("max_requests", st.cfg.circuit.maxRequests)
	}
	resp, err := c.attempt(req, st, cands, tried, xs)
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		c.cb.releaseRequest() // an upgraded connection is no longer a request
		return resp, err
	}
	var body *requestBody
	if xs != nil {
		body = &xs.cb
		body.released.Store(false)
	} else {
		body = new(requestBody)
	}
	body.ReadCloser, body.cb = resp.Body, c.cb
	resp.Body = body
	return resp, nil
}

// attempt sends req to the first candidate it can connect to, and records
// the outcome for outlier detection.
func (c *cluster) attempt(req *http.Request, st *clusterState, cands []*host, tried *triedHosts, xs *exchScratch) (*http.Response, error) {
	var lastErr error
	for _, h := range cands {
		tried.add(h)
		req.URL.Host = h.ep.addr
		c.stats.rqTotal.Add(1)
		h.stats.rqTotal.Add(1)
		h.stats.rqActive.Add(1)
		var resp *http.Response
		var err error
		if st.cfg.h2 {
			resp, err = c.h2.roundTrip(req)
		} else {
			resp, err = c.transport.roundTrip(req, xs)
		}
		h.stats.rqActive.Add(-1)
		if err != nil {
			lastErr = err
			var ce *connectError
			if errors.As(err, &ce) && req.Context().Err() == nil {
				continue // connectFailed recorded it
			}
			if errors.Is(err, ErrOverflow) {
				return nil, err
			}
			// A reset or a timeout counts as a 5xx; a request the
			// downstream gave up on does not.
			c.outlierResult(st, h, !errors.Is(err, context.Canceled))
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
		c.outlierResult(st, h, resp.StatusCode >= 500)
		return resp, nil
	}
	return nil, lastErr
}

// triedHosts are the endpoints a request's attempts used. The first few
// are kept in place, so that it lives on the caller's stack: a list
// appended through a pointer would not.
type triedHosts struct {
	fixed [maxConnectAttempts]*host
	n     int
	all   []*host // every one, once there are more than fixed holds
}

func (t *triedHosts) add(h *host) {
	if t.all == nil && t.n < len(t.fixed) {
		t.fixed[t.n] = h
		t.n++
		return
	}
	if t.all == nil {
		t.all = append(make([]*host, 0, 2*len(t.fixed)), t.fixed[:t.n]...)
	}
	t.all = append(t.all, h)
}

// list returns the endpoints tried so far (valid until the next add).
func (t *triedHosts) list() []*host {
	if t.all != nil {
		return t.all
	}
	return t.fixed[:t.n]
}

// statusClass maps an HTTP status to its stats index 1..5.
func statusClass(code int) int { return max(1, min(code/100, 5)) }

// deadlinePassed reports whether ctx has a deadline that is already past.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
