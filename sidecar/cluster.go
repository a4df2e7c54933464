package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// maxConnectAttempts bounds failover: a connection tries at most this many
// endpoints before giving up.
const maxConnectAttempts = 5

// ErrNoHealthyUpstream is returned when a cluster has no endpoint to try.
var ErrNoHealthyUpstream = errors.New("no healthy upstream")

// connectError is a failure to open (or TLS-handshake) an upstream
// connection: safe to retry on another endpoint.
type connectError struct {
	addr string
	err  error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("failed to connect to %s: %v", e.addr, e.err)
}
func (e *connectError) Unwrap() error { return e.err }

// host is one endpoint of a cluster with its (persistent) stats.
type host struct {
	ep    endpoint
	stats *hostStats
}

// clusterState is an immutable snapshot of a cluster's config and endpoints.
type clusterState struct {
	cfg     *clusterConfig
	hosts   []*host    // all, sorted by priority
	healthy [][]*host  // healthy hosts grouped by ascending priority
	rings   []hashRing // ring_hash: one ring per healthy group
	panic   hashRing   // ring_hash: all hosts (no healthy one)
	byAddr  map[string]*host
	tlsConf *tls.Config // nil: plaintext
	// matchConfs are the client configurations of cfg.tlsMatches.
	matchConfs []*tls.Config
}

// cluster is the runtime of one cluster. Its state is swapped atomically by
// the ADS loop; dials read it without locks.
type cluster struct {
	name      string
	stats     *clusterStats
	secrets   *secretStore
	state     atomic.Pointer[clusterState]
	rr        atomic.Uint64
	transport *h1Transport
	h2        h2Transport // clusters with HTTP/2 protocol options
	plainIO   bool        // Config.PlainIO
	cb        *circuit    // circuit breakers
	outlier   *outlierStats

	// applied is the CDS entry in effect (read by config_dump).
	applied atomic.Pointer[entry]
	// Owned by the ADS loop.
	edsEntry  *entry
	hostStats map[string]*hostStats
}

func newCluster(name string, reg *statsRegistry, secrets *secretStore, plainIO bool) *cluster {
	c := &cluster{name: name, stats: newClusterStats(reg, name), secrets: secrets, hostStats: map[string]*hostStats{}, plainIO: plainIO,
		cb: newCircuit(reg, name), outlier: newOutlierStats(reg, name)}
	c.transport = newH1Transport(c.dialAddr)
	c.transport.cb = c.cb
	c.h2.dial = c.dialAddr
	return c
}

// clientTLS is the client configuration of an upstream TLS context (nil:
// plaintext), offering h2 by ALPN for HTTP/2 clusters.
func (c *cluster) clientTLS(u *upstreamTLS, h2 bool) *tls.Config {
	if u == nil {
		return nil
	}
	conf := c.secrets.clientTLSConfig(u)
	if h2 {
		conf = conf.Clone()
		conf.NextProtos = []string{"h2"}
	}
	return conf
}

// apply builds and publishes a new state from a cluster config and its
// endpoints. Called by the ADS loop only.
func (c *cluster) apply(cfgEntry, edsEntry *entry, set *endpointSet) {
	cfg := cfgEntry.cfg.(*clusterConfig)
	st := &clusterState{cfg: cfg, byAddr: map[string]*host{}}
	c.cb.setLimits(cfg.circuit)
	st.tlsConf = c.clientTLS(cfg.tls, cfg.h2)
	for _, m := range cfg.tlsMatches {
		st.matchConfs = append(st.matchConfs, c.clientTLS(m.tls, cfg.h2))
	}
	live := map[string]bool{}
	var healthyCount int64
	lastPrio := int64(-1)
	for _, ep := range set.endpoints {
		hs, ok := c.hostStats[ep.addr]
		if !ok {
			hs = &hostStats{sessions: tls.NewLRUClientSessionCache(1)}
			c.hostStats[ep.addr] = hs
		}
		live[ep.addr] = true
		h := &host{ep: ep, stats: hs}
		st.hosts = append(st.hosts, h)
		st.byAddr[ep.addr] = h
		if !ep.healthy {
			continue
		}
		healthyCount++
		if int64(ep.priority) != lastPrio {
			st.healthy = append(st.healthy, nil)
			lastPrio = int64(ep.priority)
		}
		st.healthy[len(st.healthy)-1] = append(st.healthy[len(st.healthy)-1], h)
	}
	for addr := range c.hostStats {
		if !live[addr] {
			delete(c.hostStats, addr)
		}
	}
	if cfg.lb == lbRingHash {
		st.buildRings()
	}
	c.stats.membershipTotal.Store(int64(len(st.hosts)))
	c.stats.membershipHealthy.Store(healthyCount)
	old := c.state.Swap(st)
	c.applied.Store(cfgEntry)
	c.edsEntry = edsEntry
	if old != nil {
		// Pooled HTTP connections may point at removed endpoints or use old
		// TLS settings; new requests open fresh ones.
		c.closeIdle()
	}
}

// dial opens a connection to one endpoint, failing over to the next on a
// connect or TLS failure. done must be called when the connection closes.
func (c *cluster) dial(ctx context.Context) (net.Conn, *host, func(), error) {
	st := c.state.Load()
	if st == nil {
		return nil, nil, nil, ErrNoHealthyUpstream
	}
	cands := c.candidates(st, lbContext{}, nil)
	if len(cands) == 0 {
		c.stats.cxNoneHealthy.Add(1)
		return nil, nil, nil, ErrNoHealthyUpstream
	}
	var errs []error
	for _, h := range cands {
		conn, done, err := c.dialHost(ctx, st, h)
		if err == nil {
			c.outlierResult(st, h, false)
			return conn, h, done, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, ErrOverflow) {
			break
		}
	}
	return nil, nil, nil, errors.Join(errs...)
}

// dialHost connects to h within the cluster's connect timeout and, if
// configured, completes upstream TLS (SNI, our leaf, chain and SAN check).
func (c *cluster) dialHost(ctx context.Context, st *clusterState, h *host) (net.Conn, func(), error) {
	if !c.cb.acquireConn() {
		return nil, nil, overflowError("max_connections", st.cfg.circuit.maxConns)
	}
	ctx, cancel := context.WithTimeout(ctx, st.cfg.connectTimeout)
	defer cancel()
	d := net.Dialer{}
	raw, err := d.DialContext(ctx, "tcp", h.ep.addr)
	if err != nil {
		c.cb.releaseConn()
		c.connectFailed(st, h, ctx.Err() != nil)
		return nil, nil, &connectError{addr: h.ep.addr, err: err}
	}
	var conn net.Conn
	if conf := matchTLS(st.cfg.tlsMatches, st.matchConfs, st.tlsConf, h.ep); conf == nil {
		conn = dataConn(raw, c.plainIO)
	} else {
		under := tlsUnder(raw, c.plainIO)
		tc := tls.Client(under, tlsConfigFor(conf, h))
		if err := tc.HandshakeContext(ctx); err != nil {
			under.Close()
			c.stats.sslError.Add(1)
			switch {
			case errors.Is(err, ErrPeerSANMismatch):
				c.stats.sslFailSAN.Add(1)
			case errors.Is(err, ErrPeerNotTrusted):
				c.stats.sslFailVerify.Add(1)
			}
			c.cb.releaseConn()
			c.connectFailed(st, h, false)
			return nil, nil, &connectError{addr: h.ep.addr, err: err}
		}
		c.stats.sslHandshake.Add(1)
		if tc.ConnectionState().DidResume {
			c.stats.sslSessionReused.Add(1)
		}
		conn = tc
	}
	c.stats.cxTotal.Add(1)
	c.stats.cxActive.Add(1)
	h.stats.cxTotal.Add(1)
	h.stats.cxActive.Add(1)
	var once sync.Once
	done := func() {
		once.Do(func() {
			c.stats.cxActive.Add(-1)
			h.stats.cxActive.Add(-1)
			c.cb.releaseConn()
		})
	}
	return conn, done, nil
}

func (c *cluster) connectFailed(st *clusterState, h *host, timeout bool) {
	c.outlierResult(st, h, true)
	c.stats.cxConnectFail.Add(1)
	h.stats.cxConnectFail.Add(1)
	if timeout {
		c.stats.cxConnectTimeout.Add(1)
	}
}

// dialAddr is the HTTP transport's dialer: the request already names the
// endpoint (see roundTrip), so connect to exactly that one.
func (c *cluster) dialAddr(ctx context.Context, addr string) (net.Conn, error) {
	st := c.state.Load()
	if st == nil {
		return nil, ErrNoHealthyUpstream
	}
	h, ok := st.byAddr[addr]
	if !ok {
		return nil, &connectError{addr: addr, err: errors.New("endpoint was removed")}
	}
	conn, done, err := c.dialHost(ctx, st, h)
	if err != nil {
		return nil, err
	}
	return &closeNotifyConn{Conn: conn, onClose: done}, nil
}

// closeNotifyConn runs onClose once when closed.
type closeNotifyConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

// clusterManager publishes the runtime clusters by name.
type clusterManager struct {
	reg     *statsRegistry
	secrets *secretStore
	plainIO bool // Config.PlainIO, for new clusters
	byName  atomic.Pointer[map[string]*cluster]
}

func (m *clusterManager) get(name string) *cluster {
	p := m.byName.Load()
	if p == nil {
		return nil
	}
	return (*p)[name]
}

func (m *clusterManager) all() map[string]*cluster {
	p := m.byName.Load()
	if p == nil {
		return nil
	}
	return *p
}

// reconcile activates every warm cluster of cds (an EDS cluster is warm once
// its endpoints arrived, a TLS cluster once its secrets did), keeps the
// active version of a cluster whose update is still warming, and removes
// clusters that left CDS. It returns the number of warming clusters.
func (m *clusterManager) reconcile(cds, eds map[string]*entry) int {
	cur := m.all()
	next := make(map[string]*cluster, len(cds))
	warming := 0
	for name, e := range cds {
		cfg := e.cfg.(*clusterConfig)
		c := cur[name]
		set, edsEntry, ok := m.endpointsFor(cfg, eds)
		if ok && !m.secretsReady(cfg.secretNames()) {
			ok = false
		}
		if !ok {
			warming++
			if c != nil {
				next[name] = c // keep serving the active version
			}
			continue
		}
		if c == nil {
			c = newCluster(name, m.reg, m.secrets, m.plainIO)
		}
		// Compare decoded values, not entries: a re-sent, unchanged resource
		// gets a new entry (new version) but keeps its decoded value.
		if prev := c.applied.Load(); prev == nil || prev.cfg != e.cfg || entryCfg(c.edsEntry) != entryCfg(edsEntry) {
			c.apply(e, edsEntry, set)
		} else {
			c.applied.Store(e)
			c.edsEntry = edsEntry
		}
		next[name] = c
	}
	for name, c := range cur {
		if _, ok := next[name]; !ok {
			c.closeIdle()
		}
	}
	m.byName.Store(&next)
	return warming
}

func (m *clusterManager) endpointsFor(cfg *clusterConfig, eds map[string]*entry) (*endpointSet, *entry, bool) {
	if !cfg.eds {
		return cfg.static, nil, true
	}
	e, ok := eds[cfg.edsName]
	if !ok {
		return nil, nil, false
	}
	return e.cfg.(*endpointSet), e, true
}

func (m *clusterManager) secretsReady(names []string) bool {
	for _, n := range names {
		if m.secrets.get(n) == nil {
			return false
		}
	}
	return true
}

// entryCfg returns an entry's decoded value, nil for a nil entry.
func entryCfg(e *entry) any {
	if e == nil {
		return nil
	}
	return e.cfg
}
