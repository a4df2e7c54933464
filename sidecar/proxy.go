package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrAlreadyStarted is returned by a second Start.
var ErrAlreadyStarted = errors.New("proxy already started")

// Proxy is one running sidecar. Create it with New, then Start; Close stops
// it. All methods are safe for concurrent use.
type Proxy struct {
	cfg  Config
	log  hclog.Logger
	node *corev3.Node

	stats          *statsRegistry
	connectedGauge *atomic.Int64
	reconnects     *atomic.Uint64

	store   *store
	secrets *secretStore
	routes  routeStore
	// routesMu serializes publishRoutes; routesHeld are the route
	// configurations waiting for their clusters, since when.
	routesMu   sync.Mutex
	routesHeld map[*routeConfig]time.Time
	clusters   *clusterManager
	listeners  *listenerManager
	authz      *authorizer
	conn       *grpc.ClientConn
	connSem    chan struct{}
	connWG     sync.WaitGroup // downstream connection goroutines
	ready      atomic.Bool

	mu       sync.Mutex
	started  bool
	closed   bool
	cancel   context.CancelFunc
	adsDone  chan struct{}
	adminLn  net.Listener
	adminSrv *http.Server
}

// New validates cfg and prepares a proxy. It opens no socket and does not
// contact the control plane; Start does.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	target, _ := grpcTarget(cfg.XDSAddr)
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: backoffBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
	)
	if err != nil {
		return nil, fmt.Errorf("failed to create the control plane client: %w", err)
	}
	log := cfg.Logger.Named("sidecar").With("proxy_id", cfg.ProxyID)
	p := &Proxy{
		cfg:     cfg,
		log:     log,
		node:    &corev3.Node{Id: cfg.ProxyID, Cluster: cfg.Cluster, UserAgentName: "meshlet-sidecar"},
		stats:   newStatsRegistry(),
		store:   newStore(),
		secrets: &secretStore{},
		conn:    conn,
		connSem: make(chan struct{}, maxDownstreamConns),
	}
	p.connectedGauge = p.stats.gauge("control_plane.connected_state")
	p.reconnects = p.stats.counter("control_plane.reconnects")
	p.clusters = &clusterManager{reg: p.stats, secrets: p.secrets, plainIO: cfg.PlainIO}
	p.listeners = newListenerManager(p)
	p.authz = newAuthorizer(authv3.NewAuthorizationClient(conn), cfg.Token, log.Named("authz"))
	return p, nil
}

// Start binds the admin listener and starts the ADS client. ctx bounds the
// control plane session; Close must still be called to stop the listeners.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return ErrAlreadyStarted
	}
	ln, err := net.Listen("tcp", p.cfg.AdminBind)
	if err != nil {
		return fmt.Errorf("failed to bind the admin listener %s: %w", p.cfg.AdminBind, err)
	}
	p.started = true
	p.adminLn = ln
	p.adminSrv = &http.Server{Handler: p.adminMux(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.adminSrv.Serve(ln) }()

	adsCtx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.adsDone = make(chan struct{})
	ads := &adsClient{p: p, log: p.log.Named("xds"), client: discoverygrpc.NewAggregatedDiscoveryServiceClient(p.conn)}
	go p.authz.reauthorizeLoop(adsCtx, reauthInterval)
	go func() {
		defer close(p.adsDone)
		ads.run(adsCtx)
	}()
	p.log.Info("sidecar started", "xds_addr", p.cfg.XDSAddr, "admin_addr", ln.Addr().String(), "delta", p.cfg.Delta, "plain_io", p.cfg.PlainIO)
	return nil
}

// Ready reports whether the initial configuration has been applied (every
// listener of the first LDS/CDS responses is serving). It stays true.
func (p *Proxy) Ready() bool { return p.ready.Load() }

// AdminAddr returns the admin listener's bound address ("" before Start).
func (p *Proxy) AdminAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.adminLn == nil {
		return ""
	}
	return p.adminLn.Addr().String()
}

// Close stops the ADS client, stops accepting, drains open connections (up
// to the drain timeout) and releases everything. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cancel, adsDone, adminSrv := p.cancel, p.adsDone, p.adminSrv
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-adsDone
	}
	p.listeners.closeAll()
	p.connWG.Wait() // every connection was closed by the drain
	for _, c := range p.clusters.all() {
		c.closeIdle()
	}
	var errs []error
	if adminSrv != nil {
		if err := adminSrv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("failed to close the admin server: %w", err))
		}
	}
	if err := p.conn.Close(); err != nil {
		errs = append(errs, fmt.Errorf("failed to close the control plane connection: %w", err))
	}
	p.log.Info("sidecar stopped")
	return errors.Join(errs...)
}

// Run runs a proxy until ctx is done, then drains and stops it.
func Run(ctx context.Context, cfg Config) error {
	p, err := New(cfg)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		_ = p.Close()
		return err
	}
	<-ctx.Done()
	return p.Close()
}

func (p *Proxy) acquireConn() bool {
	select {
	case p.connSem <- struct{}{}:
		p.connWG.Add(1)
		return true
	default:
		return false
	}
}

func (p *Proxy) releaseConn() {
	<-p.connSem
	p.connWG.Done()
}

// applyUpdate validates a response and, if all of it is valid, applies it.
// It runs on the ADS loop only.
func (p *Proxy) applyUpdate(u *update, subscribed map[string]bool) error {
	k := kindOf(u.typeURL)
	if k == nil {
		return fmt.Errorf("resource type %s is not supported", u.typeURL)
	}
	prefix := "control_plane." + k.short + "."
	p.stats.counter(prefix + "update_attempt").Add(1)
	next, err := p.store.prepare(u, subscribed)
	if err == nil && u.typeURL == typeListener {
		err = p.listeners.prepare(next)
	}
	if err != nil {
		p.stats.counter(prefix + "update_rejected").Add(1)
		return err
	}
	p.store.commit(u.typeURL, u.version, next)
	p.reconcile()
	p.stats.counter(prefix + "update_success").Add(1)
	return nil
}

// reconcile brings the runtime in line with the store: secrets, clusters,
// routes (which wait for their clusters), then listeners (which warm on
// the other three).
func (p *Proxy) reconcile() {
	sds := p.store.get(typeSecret)
	secrets := make(map[string]*secret, len(sds))
	for n, e := range sds {
		secrets[n] = e.cfg.(*secret)
	}
	p.secrets.replace(secrets)
	epoch := ""
	if e := p.store.get(typeRuntime)[AuthzEpochResource]; e != nil {
		epoch = e.cfg.(*authzEpoch).epoch
	}
	p.authz.setEpoch(epoch)
	warmingClusters := p.clusters.reconcile(p.store.get(typeCluster), p.store.get(typeEndpoint))
	p.publishRoutes()
	warmingListeners := p.listeners.reconcile(p.store.get(typeListener), p.listenerWarm)
	p.stats.gauge("cluster_manager.warming_clusters").Store(int64(warmingClusters))
	p.stats.gauge("cluster_manager.active_clusters").Store(int64(len(p.clusters.all())))
	p.stats.gauge("listener_manager.total_listeners_warming").Store(int64(warmingListeners))
	p.stats.gauge("listener_manager.total_listeners_active").Store(int64(len(p.listeners.active())))
	if p.ready.Load() {
		return
	}
	_, lds := p.store.accepted(typeListener)
	_, cds := p.store.accepted(typeCluster)
	if lds && cds && warmingListeners == 0 {
		p.ready.Store(true)
		p.log.Info("initial configuration applied; ready")
		if p.cfg.OnReady != nil {
			go p.cfg.OnReady()
		}
	}
}

// listenerWarm reports whether everything a listener references is known.
func (p *Proxy) listenerWarm(cfg *listenerConfig) bool {
	for _, n := range cfg.secretNames() {
		if p.secrets.get(n) == nil {
			return false
		}
	}
	names := cfg.clusterNames()
	for _, rn := range cfg.rdsNames() {
		rc := p.routes.get(rn)
		if rc == nil {
			return false
		}
		names = append(names, rc.clusterNames()...)
	}
	for _, n := range names {
		if p.clusters.get(n) == nil {
			return false
		}
	}
	return true
}

// wantedNames returns the EDS, RDS and SDS names referenced by the accepted
// configuration and by what is still serving (an active listener whose
// update is warming keeps its secrets).
func (p *Proxy) wantedNames() map[string]map[string]bool {
	eds, rds, sds := map[string]bool{}, map[string]bool{}, map[string]bool{}
	addCluster := func(c *clusterConfig) {
		if c.eds {
			eds[c.edsName] = true
		}
		for _, n := range c.secretNames() {
			sds[n] = true
		}
	}
	addListener := func(l *listenerConfig) {
		for _, n := range l.secretNames() {
			sds[n] = true
		}
		for _, rn := range l.rdsNames() {
			rds[rn] = true
		}
	}
	for _, e := range p.store.get(typeCluster) {
		addCluster(e.cfg.(*clusterConfig))
	}
	for _, c := range p.clusters.all() {
		if st := c.state.Load(); st != nil {
			addCluster(st.cfg)
		}
	}
	for _, e := range p.store.get(typeListener) {
		addListener(e.cfg.(*listenerConfig))
	}
	var ls []*listenerConfig
	for _, e := range p.listeners.active() {
		addListener(e.cfg.(*listenerConfig))
		ls = append(ls, e.cfg.(*listenerConfig))
	}
	for _, e := range p.store.get(typeListener) {
		ls = append(ls, e.cfg.(*listenerConfig))
	}
	rtds := map[string]bool{}
	if authzWanted(ls) {
		rtds[AuthzEpochResource] = true
	}
	return map[string]map[string]bool{typeEndpoint: eds, typeRoute: rds, typeSecret: sds, typeRuntime: rtds}
}

// buildListenerState prepares what connections of a listener config need.
func (p *Proxy) buildListenerState(cfg *listenerConfig) *listenerState {
	if cfg.byServerName != nil {
		return p.buildServerNameState(cfg)
	}
	st := &listenerState{cfg: cfg}
	ch := cfg.chain
	if ch.tls != nil {
		st.tlsConf = p.secrets.serverTLSConfig(ch.tls)
	}
	if ch.authz != nil {
		st.authzStats = newAuthzStats(p.stats, ch.authz.statPrefix)
	}
	if ch.tcp != nil {
		st.tcpStats = newTCPStats(p.stats, ch.tcp.statPrefix)
	}
	if ch.http != nil {
		st.httpStats = newHTTPStats(p.stats, ch.http.statPrefix)
	}
	return st
}

// routeStore publishes the current RDS route configurations. Requests
// read it per request (lock free); a request whose configuration has not
// arrived yet waits for the next publication.
type routeStore struct {
	m       atomic.Pointer[map[string]*routeConfig]
	mu      sync.Mutex
	changed chan struct{} // closed on the next replace
}

func (r *routeStore) get(name string) *routeConfig {
	m := r.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[name]
}

func (r *routeStore) replace(m map[string]*routeConfig) {
	r.m.Store(&m)
	r.mu.Lock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
}

// wait returns the named configuration, waiting up to d for it to be
// published; nil if it was not (or ctx ended).
func (r *routeStore) wait(ctx context.Context, name string, d time.Duration) *routeConfig {
	if rc := r.get(name); rc != nil {
		return rc
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		r.mu.Lock()
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		if rc := r.get(name); rc != nil {
			return rc
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// publishRoutes publishes the accepted route configurations. A changed
// configuration naming a cluster that is not active yet (still warming:
// its endpoints or secrets are on their way) waits, up to
// routeWarmTimeout, while the previous one keeps serving, so a new split
// never sends requests to a missing cluster; after that it applies anyway
// (as Envoy's initial fetch timeout does). Called by the ADS loop and by
// the warm-up timer.
func (p *Proxy) publishRoutes() {
	p.routesMu.Lock()
	defer p.routesMu.Unlock()
	rds := p.store.get(typeRoute)
	routes := make(map[string]*routeConfig, len(rds))
	held := make(map[*routeConfig]time.Time, len(p.routesHeld))
	now := time.Now()
	for n, e := range rds {
		rc := e.cfg.(*routeConfig)
		old := p.routes.get(n)
		if old == nil || old == rc || p.clustersActive(rc.clusterNames()) {
			routes[n] = rc
			continue
		}
		since, ok := p.routesHeld[rc]
		if !ok {
			since = now
			time.AfterFunc(routeWarmTimeout, p.publishRoutes)
		}
		if now.Sub(since) >= routeWarmTimeout {
			p.log.Warn("route configuration names clusters that did not warm; applying it anyway", "route_config", n)
			routes[n] = rc
			continue
		}
		held[rc] = since
		routes[n] = old
	}
	p.routesHeld = held
	p.routes.replace(routes)
}

func (p *Proxy) clustersActive(names []string) bool {
	for _, n := range names {
		if p.clusters.get(n) == nil {
			return false
		}
	}
	return true
}
