package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// routeWarmTimeout is how long a new route configuration waits for its
// clusters to warm (a variable so tests can shorten it).
var routeWarmTimeout = 10 * time.Second

// Retry back-off (Envoy's defaults: 25 ms base, 10x max, full jitter) and
// how long a request waits for its listener's RDS configuration.
const (
	retryBackoffBase = 25 * time.Millisecond
	retryBackoffMax  = 250 * time.Millisecond
	routeWaitTimeout = 5 * time.Second
	retryDrainBody   = 64 << 10
)

// route authorizes the request (HTTP ext_authz), picks its route and
// cluster and proxies it; it reports whether the connection may be kept.
func (h *h1conn) route(req *http.Request, keep bool) bool {
	l, st := h.l, h.c.state.httpStats
	hc := h.c.state.cfg.chain.http
	if hasFragment(req) {
		return h.localReply(req, http.StatusBadRequest, "", false)
	}
	if hc.norm.active() {
		switch hc.norm.apply(req) {
		case pathReject:
			return h.localReply(req, http.StatusBadRequest, "", false)
		case pathRedirect:
			return h.reply(req, http.StatusTemporaryRedirect, http.Header{"Location": {req.URL.RequestURI()}}, "", keep)
		}
	}
	if hc.authz != nil {
		if ok, kept := h.extAuthz(req, hc.authz, keep); !ok {
			return kept
		}
	}
	rc := hc.routes
	if hc.rdsName != "" {
		rc = l.p.routes.wait(l.ctx, hc.rdsName, routeWaitTimeout)
	}
	rt := rc.match(&reqView{req: req, scheme: h.proto})
	if rt == nil {
		st.noRoute.Add(1)
		return h.localReply(req, http.StatusNotFound, "", keep)
	}
	if up := requestedUpgrade(req.Header); up != "" && !upgradeAllowed(hc.upgrades, rt.upgrades, up) {
		// Refused as Envoy does (403, details upgrade_failed); the
		// connection closes, as bytes of the upgraded protocol may
		// follow the head.
		st.upgradeRefused.Add(1)
		return h.localReply(req, http.StatusForbidden, "", false)
	}
	wc := &rt.clusters[pickIndex(rt.clusters)]
	cl := l.p.clusters.get(wc.name)
	if cl == nil {
		st.noCluster.Add(1)
		return h.localReply(req, http.StatusServiceUnavailable, "no healthy upstream", keep)
	}
	return h.proxy(req, rt, wc.hdrs, cl, keep)
}

// match returns the first route of the request's virtual host that
// matches it; nil if none (or no configuration).
func (rc *routeConfig) match(v *reqView) *route {
	if rc == nil {
		return nil
	}
	var vh *virtualHost
	if len(rc.vhosts) == 1 && len(rc.vhosts[0].domains) == 1 && rc.vhosts[0].domains[0] == "*" {
		vh = rc.vhosts[0] // the shape meshlet's xDS emits: no host to parse
	} else {
		vh = rc.selectVirtualHost(v.req.Host)
	}
	if vh == nil {
		return nil
	}
	for _, r := range vh.routes {
		if r.matches(v) {
			return r
		}
	}
	return nil
}

// proxy sends req to the cluster (with the route's retries) and relays the
// answer.
func (h *h1conn) proxy(req *http.Request, rt *route, ch *clusterHeaders, cl *cluster, keep bool) bool {
	ctx := h.rctx.begin(rt.timeout)
	defer h.rctx.end()
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answered here, as Envoy does by default; the upstream gets the
		// body without waiting.
		req.Header.Del("Expect")
		if req.Body != http.NoBody {
			_, _ = h.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if h.bw.Flush() != nil {
				return false
			}
		}
	}
	lbc := h.lbContext(req, rt, cl)
	upgrade := h.outbound(req, rt, &h.owned)
	if ch != nil {
		ch.req.apply(req.Header)
	}
	if !rt.reqHeaders.empty() {
		rt.reqHeaders.apply(req.Header)
	}
	if req.Context() != ctx {
		req = req.WithContext(ctx) // read before the context was renewed, or by net/http
	}
	resp, err := sendWithRetries(req, rt.retry, cl, lbc, &h.exch)
	if err != nil {
		h.c.state.httpStats.upstreamFail.Add(1)
		if errors.Is(err, ErrOverflow) {
			return h.overloadedReply(req, keep)
		}
		code := http.StatusServiceUnavailable
		// The route's deadline passing is a timeout, whichever error the
		// transport reported when it noticed.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errPerTryTimeout) || timedOut(ctx) {
			code = http.StatusGatewayTimeout
			cl.stats.rqTimeout.Add(1)
			return h.localReply(req, code, "upstream request timeout", keep)
		}
		return h.localReply(req, code, "upstream connect error or disconnect/reset before headers", keep)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h.relayUpgrade(req, resp, upgrade)
		return false
	}
	if upgrade != "" {
		// Refused upstream: bytes of the protocol asked for may follow
		// the head, so the connection closes after the answer (as
		// Envoy's does, the request never having completed).
		keep = false
	}
	if ch != nil {
		ch.resp.apply(resp.Header)
	}
	if !rt.respHeaders.empty() {
		rt.respHeaders.apply(resp.Header)
	}
	if lbc.setCookie != "" {
		resp.Header.Add("Set-Cookie", lbc.setCookie)
	}
	return h.writeResponse(req, resp, keep)
}

// sendWithRetries runs the request's attempts: the first, then up to
// num_retries more when the retry policy's conditions hold, each after a
// jittered back-off and on another endpoint when there is one. A request
// that may have reached the upstream is retried only if it is replayable.
// A retry holds one of the cluster's max_retries slots from its back-off
// to its attempt's answer; with none free the failed answer stands.
func sendWithRetries(req *http.Request, rp *retryPolicy, cl *cluster, lbc lbContext, xs *exchScratch) (*http.Response, error) {
	var tried triedHosts
	retrying := false
	defer func() {
		if retrying {
			cl.cb.releaseRetry()
		}
	}()
	for attempt := 0; ; attempt++ {
		resp, err := tryOnce(req, rp, cl, lbc, &tried, xs)
		if retrying {
			cl.cb.releaseRetry()
			retrying = false
		}
		if attempt > 0 && err == nil && resp.StatusCode < 500 {
			cl.stats.rqRetrySuccess.Add(1)
		}
		if rp == nil || attempt >= rp.numRetries || req.Context().Err() != nil || !shouldRetry(req, rp, resp, err) {
			return resp, err
		}
		if !cl.cb.acquireRetry() {
			return resp, err
		}
		retrying = true
		if resp != nil {
			// Read a little of the failed answer so its connection can be
			// reused; a long one is simply closed.
			_, _ = io.CopyN(io.Discard, resp.Body, retryDrainBody)
			resp.Body.Close()
		}
		cl.stats.rqRetry.Add(1)
		if !retrySleep(req.Context(), rp, attempt) {
			return nil, req.Context().Err()
		}
	}
}

// tryOnce is one attempt, bounded by the policy's per_try_timeout if any
// (the timeout then also covers reading the response body).
func tryOnce(req *http.Request, rp *retryPolicy, cl *cluster, lbc lbContext, tried *triedHosts, xs *exchScratch) (*http.Response, error) {
	if rp == nil || rp.perTry <= 0 {
		return cl.roundTrip(req, lbc, tried, xs)
	}
	ctx, cancel := context.WithTimeout(req.Context(), rp.perTry)
	resp, err := cl.roundTrip(req.WithContext(ctx), lbc, tried, xs)
	if err != nil {
		cancel()
		if ctx.Err() != nil && req.Context().Err() == nil {
			cl.stats.rqPerTryTimeout.Add(1)
			err = fmt.Errorf("%w: %w", errPerTryTimeout, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		cancel() // an upgraded connection is detached from the attempt
		return resp, nil
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// errPerTryTimeout marks an attempt that ran out of its per_try_timeout.
var errPerTryTimeout = errors.New("upstream per-try timeout")

// cancelBody releases an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// shouldRetry applies a retry policy to an attempt's outcome.
func shouldRetry(req *http.Request, rp *retryPolicy, resp *http.Response, err error) bool {
	if err != nil {
		if errors.Is(err, ErrNoHealthyUpstream) || errors.Is(err, ErrOverflow) {
			return false
		}
		var ce *connectError
		connectFailed := errors.As(err, &ce)
		refused := errors.Is(err, errNothingWritten)
		if errors.Is(err, errPerTryTimeout) {
			// Envoy answers a per-try timeout with a 504.
			return replayable(req) && rp.retriableStatus(http.StatusGatewayTimeout)
		}
		if !connectFailed && !refused && !replayable(req) {
			return false // part of the request may have been processed
		}
		return rp.retriableError(connectFailed, refused)
	}
	return rp.retriableStatus(resp.StatusCode) && replayable(req)
}

// retrySleep waits the jittered back-off before retry number attempt+1;
// false if ctx ended first.
func retrySleep(ctx context.Context, rp *retryPolicy, attempt int) bool {
	d := min(rp.backoffBase<<min(attempt, 10), rp.backoffMax)
	t := time.NewTimer(rand.N(d) + time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lbContext computes the request's hash for a ring_hash cluster from the
// route's hash policies (Envoy combines them: rotate left by one, xor).
func (h *h1conn) lbContext(req *http.Request, rt *route, cl *cluster) lbContext {
	st := cl.state.Load()
	if len(rt.hash) == 0 || st == nil || st.cfg.lb != lbRingHash {
		return lbContext{}
	}
	var out lbContext
	for _, hp := range rt.hash {
		v, ok := h.hashInput(req, hp)
		if !ok && hp.kind == hashCookie && hp.cookieTTL != nil && out.setCookie == "" {
			v, ok = strconv.FormatUint(rand.Uint64(), 16), true
			out.setCookie = hashCookieHeader(hp, v)
		}
		if !ok {
			continue
		}
		hv := hashString(v)
		if out.hasHash {
			hv ^= out.hash<<1 | out.hash>>63
		}
		out.hash, out.hasHash = hv, true
		if hp.terminal {
			break
		}
	}
	return out
}

// hashCookieHeader is the Set-Cookie value of a generated hash cookie.
func hashCookieHeader(hp hashPolicy, value string) string {
	c := &http.Cookie{Name: hp.name, Value: value, Path: hp.cookiePath, HttpOnly: true}
	if ttl := *hp.cookieTTL; ttl > 0 {
		c.MaxAge = max(1, int(ttl/time.Second))
	}
	return c.String()
}

func (h *h1conn) hashInput(req *http.Request, hp hashPolicy) (string, bool) {
	switch hp.kind {
	case hashHeader:
		return (&reqView{req: req, scheme: h.proto}).header(hp.name)
	case hashCookie:
		c, err := req.Cookie(hp.name)
		if err != nil {
			return "", false
		}
		return c.Value, true
	case hashSourceIP:
		return h.client, h.client != ""
	case hashQuery:
		vals, ok := req.URL.Query()[hp.name]
		if !ok || len(vals) == 0 {
			return "", false
		}
		return vals[0], true
	}
	return "", false
}
