package sidecar

import (
	"crypto/tls"
	"fmt"
	"io"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
)

// statsRegistry holds named counters and gauges. Creating a stat takes a
// lock (rare: at configuration time); updating one is a single atomic op.
// A name always maps to the same stat, so counters survive listener and
// cluster updates.
type statsRegistry struct {
	mu       sync.Mutex
	counters map[string]*atomic.Uint64
	gauges   map[string]*atomic.Int64
}

func newStatsRegistry() *statsRegistry {
	return &statsRegistry{
		counters: make(map[string]*atomic.Uint64),
		gauges:   make(map[string]*atomic.Int64),
	}
}

// counter returns the counter called name, creating it at zero.
func (r *statsRegistry) counter(name string) *atomic.Uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.counters[name]
	if !ok {
		c = new(atomic.Uint64)
		r.counters[name] = c
	}
	return c
}

// gauge returns the gauge called name, creating it at zero.
func (r *statsRegistry) gauge(name string) *atomic.Int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.gauges[name]
	if !ok {
		g = new(atomic.Int64)
		r.gauges[name] = g
	}
	return g
}

// value returns the current value of a counter or gauge and whether it
// exists.
func (r *statsRegistry) value(name string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.counters[name]; ok {
		return int64(c.Load()), true
	}
	if g, ok := r.gauges[name]; ok {
		return g.Load(), true
	}
	return 0, false
}

// writeText writes "name: value" lines sorted by name, like Envoy's /stats,
// keeping only names that match filter when it is non-nil.
func (r *statsRegistry) writeText(w io.Writer, filter *regexp.Regexp) error {
	r.mu.Lock()
	lines := make([]string, 0, len(r.counters)+len(r.gauges))
	for name, c := range r.counters {
		if filter == nil || filter.MatchString(name) {
			lines = append(lines, fmt.Sprintf("%s: %d\n", name, c.Load()))
		}
	}
	for name, g := range r.gauges {
		if filter == nil || filter.MatchString(name) {
			lines = append(lines, fmt.Sprintf("%s: %d\n", name, g.Load()))
		}
	}
	r.mu.Unlock()
	sort.Strings(lines)
	for _, l := range lines {
		if _, err := io.WriteString(w, l); err != nil {
			return err
		}
	}
	return nil
}

// listenerStats are the per-listener counters, named like Envoy's
// listener.<address>.* (the address with ':' replaced by '_').
type listenerStats struct {
	cxTotal, cxDestroy, cxOverflow *atomic.Uint64
	cxActive                       *atomic.Int64
	sslHandshake, sslError         *atomic.Uint64
	sslSessionReused               *atomic.Uint64
	noFilterChain                  *atomic.Uint64
}

func newListenerStats(r *statsRegistry, addr string) *listenerStats {
	p := "listener." + statName(addr) + "."
	return &listenerStats{
		cxTotal:       r.counter(p + "downstream_cx_total"),
		cxDestroy:     r.counter(p + "downstream_cx_destroy"),
		cxOverflow:    r.counter(p + "downstream_cx_overflow"),
		cxActive:      r.gauge(p + "downstream_cx_active"),
		sslHandshake:  r.counter(p + "ssl.handshake"),
		sslError:      r.counter(p + "ssl.connection_error"),
		noFilterChain: r.counter(p + "no_filter_chain_match"),

		sslSessionReused: r.counter(p + "ssl.session_reused"),
	}
}

// clusterStats are the per-cluster counters, named cluster.<name>.*.
type clusterStats struct {
	cxTotal, cxConnectFail, cxConnectTimeout, cxNoneHealthy *atomic.Uint64
	cxActive                                                *atomic.Int64
	txBytes, rxBytes                                        *atomic.Uint64
	rqTotal, rqRetry, rqRetrySuccess, rqTimeout             *atomic.Uint64
	rqPerTryTimeout                                         *atomic.Uint64
	rqClass                                                 [6]*atomic.Uint64 // index = status/100
	sslError, sslFailSAN, sslFailVerify                     *atomic.Uint64
	sslHandshake, sslSessionReused                          *atomic.Uint64
	membershipHealthy, membershipTotal                      *atomic.Int64
}

func newClusterStats(r *statsRegistry, name string) *clusterStats {
	p := "cluster." + name + "."
	s := &clusterStats{
		cxTotal:           r.counter(p + "upstream_cx_total"),
		cxConnectFail:     r.counter(p + "upstream_cx_connect_fail"),
		cxConnectTimeout:  r.counter(p + "upstream_cx_connect_timeout"),
		cxNoneHealthy:     r.counter(p + "upstream_cx_none_healthy"),
		cxActive:          r.gauge(p + "upstream_cx_active"),
		txBytes:           r.counter(p + "upstream_cx_tx_bytes_total"),
		rxBytes:           r.counter(p + "upstream_cx_rx_bytes_total"),
		rqTotal:           r.counter(p + "upstream_rq_total"),
		rqRetry:           r.counter(p + "upstream_rq_retry"),
		rqRetrySuccess:    r.counter(p + "upstream_rq_retry_success"),
		rqTimeout:         r.counter(p + "upstream_rq_timeout"),
		rqPerTryTimeout:   r.counter(p + "upstream_rq_per_try_timeout"),
		sslError:          r.counter(p + "ssl.connection_error"),
		sslFailSAN:        r.counter(p + "ssl.fail_verify_san"),
		sslFailVerify:     r.counter(p + "ssl.fail_verify_error"),
		sslHandshake:      r.counter(p + "ssl.handshake"),
		sslSessionReused:  r.counter(p + "ssl.session_reused"),
		membershipHealthy: r.gauge(p + "membership_healthy"),
		membershipTotal:   r.gauge(p + "membership_total"),
	}
	for i := 1; i <= 5; i++ {
		s.rqClass[i] = r.counter(fmt.Sprintf("%supstream_rq_%dxx", p, i))
	}
	return s
}

// hostStats are one endpoint's counters, shown by /clusters.
type hostStats struct {
	cxTotal, cxConnectFail, rqTotal, rqSuccess, rqError, rqTimeout atomic.Uint64
	cxActive, rqActive                                             atomic.Int64
	outlier                                                        hostOutlier
	// sessions holds the endpoint's TLS session tickets (resumption;
	// see cluster.tlsConfigFor). It lives here, with the endpoint's
	// other state that outlives configuration updates.
	sessions tls.ClientSessionCache
}

// authzStats are the ext_authz network filter's counters,
// ext_authz.<stat_prefix>.*.
type authzStats struct {
	total, ok, denied, errors, failureModeAllowed, staleDecision *atomic.Uint64
	// reauthClosed counts open connections closed because a later check
	// (after an intention change) denied their identity pair.
	reauthClosed *atomic.Uint64
}

func newAuthzStats(r *statsRegistry, prefix string) *authzStats {
	p := "ext_authz." + prefix + "."
	return &authzStats{
		total:              r.counter(p + "total"),
		ok:                 r.counter(p + "ok"),
		denied:             r.counter(p + "denied"),
		errors:             r.counter(p + "error"),
		failureModeAllowed: r.counter(p + "failure_mode_allowed"),
		staleDecision:      r.counter(p + "stale_decision"),
		reauthClosed:       r.counter(p + "reauthorization_closed"),
	}
}

// statName makes an address usable inside a dotted stat name.
func statName(addr string) string {
	b := []byte(addr)
	for i, c := range b {
		if c == ':' {
			b[i] = '_'
		}
	}
	return string(b)
}
