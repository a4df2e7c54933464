package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// CertSource is what the server needs from the CA (ca.Manager implements it).
type CertSource interface {
	TrustDomain() string
	Roots() ca.Roots
	Leaf(ctx context.Context, service string) (*ca.Leaf, error)
	// HoldLeaf keeps service's leaf cached until release (see holds.go).
	HoldLeaf(service string) (release func(), err error)
	Subscribe(fn func(ca.Event)) (cancel func())
}

// Config configures a Server.
type Config struct {
	Catalog    *catalog.Catalog
	Certs      CertSource
	Datacenter string        // default "dc1"
	Coalesce   time.Duration // how long a burst of changes is batched; default 10ms
	Logger     hclog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept in a private registry
	// LocalProxy, when set, tells the proxies this server serves: those of
	// its own node. The catalog also holds other nodes' proxies (their
	// endpoints), whose config and leaves this server must not build.
	// It also tells the local connect apps (plain instances with Connect),
	// the only ones whose leaves this server holds.
	// nil: every proxy in the catalog is local.
	LocalProxy func(catalog.ServiceInstance) bool
	// ConfigEntries are the L7 config entries compiled into each
	// upstream's discovery chain (nil: none, every chain is the default).
	ConfigEntries *configentry.Registry
	// ACL, when set (the agent runs with acl { enabled = true }), makes
	// the host listeners (TCP 8502) serve only streams whose
	// x-consul-token metadata resolves to a token with service:write on
	// the proxy's destination service (or a management token), as
	// Consul's xDS server does. nil: whoever reaches them is trusted as
	// the host. Allocation sockets are scoped to their allocation either
	// way.
	ACL ACLResolver
	// ACLRecheck is how often, with ACL set, the tokens of open streams
	// are resolved again; a stream whose token was deleted, expired or
	// lost its permission is ended (PermissionDenied). Zero:
	// DefaultACLRecheck.
	ACLRecheck time.Duration
	// AuthzEpoch, when set, is published to the built-in proxies so they
	// can cache authorization allows (see EpochSource).
	AuthzEpoch EpochSource

	// Test hooks (nil: configentry's Set.Compile and MatchFilter).
	compile     compileFunc
	matchFilter matchFunc
}

// ACLResolver resolves a request's token secret to what it may do
// (acl.Resolver implements it).
type ACLResolver interface {
	Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error)
}

// ErrInvalidServerConfig is returned by NewServer for a bad Config.
var ErrInvalidServerConfig = errors.New("invalid xDS server config")

const (
	defaultCoalesce  = 10 * time.Millisecond
	leafFetchTimeout = 10 * time.Second
	leafRetryDelay   = 2 * time.Second
	stopGrace        = 5 * time.Second
)

// Server serves xDS over ADS (SotW and delta) from the catalog and the CA.
type Server struct {
	cfg     Config
	log     hclog.Logger
	b       builder
	cache   *xdsCache
	grpc    *grpc.Server
	m       *metrics
	tracker *tracker
	ctx     context.Context
	cancel  context.CancelFunc

	pendMu sync.Mutex
	pend   changes
	wake   chan struct{}
	wg     sync.WaitGroup
	unsubs []func()
	stop   sync.Once

	rec reconciler // owned by the reconciler goroutine

	statusMu sync.Mutex
	status   map[string]*proxyStatus

	declared declaredNodes // the proxies the allocation sockets declare
}

// NewServer builds the server, subscribes to the catalog and the CA and
// starts compiling resources. Call Serve to accept connections.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Catalog == nil {
		return nil, fmt.Errorf("%w: Catalog is required", ErrInvalidServerConfig)
	}
	if cfg.Certs == nil {
		return nil, fmt.Errorf("%w: Certs is required", ErrInvalidServerConfig)
	}
	td := cfg.Certs.TrustDomain()
	if td == "" {
		return nil, fmt.Errorf("%w: the CA has no trust domain", ErrInvalidServerConfig)
	}
	if cfg.Datacenter == "" {
		cfg.Datacenter = "dc1"
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = defaultCoalesce
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	if cfg.ConfigEntries == nil {
		cfg.ConfigEntries = configentry.NewRegistry()
	}
	if cfg.matchFilter == nil {
		cfg.matchFilter = configentry.MatchFilter
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg,
		log: cfg.Logger.Named("xds"),
		b: builder{dc: cfg.Datacenter, trustDomain: td, compile: cfg.compile, instances: cfg.Catalog.Service,
			proxies:      cfg.Catalog.Proxies,
			meshServices: func() []string { return meshServices(cfg.Catalog, cfg.Datacenter) }},
		m:      m,
		wake:   make(chan struct{}, 1),
		status: map[string]*proxyStatus{},
		rec:    newReconciler(),
	}
	s.cache = newCache(s.log)
	s.cache.expected = s.expectProxy
	s.tracker = newTracker(s)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	xs := serverv3.NewServer(s.ctx, s.cache, s.tracker, sotw.WithOrderedADS(), sotw.WithLogger(cpLogger{s.log.Named("server")}))
	s.grpc = grpc.NewServer(grpc.Creds(listenerCreds{}), grpc.ChainStreamInterceptor(streamInterceptor), grpc.ChainUnaryInterceptor(s.unaryInterceptor), grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: 5 * time.Second, PermitWithoutStream: true,
	}))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.grpc, xs)

	// Subscribe first, then queue a full sync: nothing can fall in between.
	s.unsubs = append(s.unsubs, cfg.Catalog.Subscribe(s.onCatalog), cfg.Certs.Subscribe(s.onCA),
		cfg.ConfigEntries.Subscribe(s.onConfigEntries))
	if cfg.AuthzEpoch != nil {
		s.watchAuthzEpoch(cfg.AuthzEpoch)
	}
	s.enqueue(func(c *changes) {
		c.roots = true
		for _, p := range cfg.Catalog.Proxies() {
			if !s.isLocal(p) {
				continue
			}
			c.proxies[p.ID] = struct{}{}
		}
		for name := range cfg.Catalog.Services() {
			c.services[name] = struct{}{}
		}
	})
	s.wg.Add(1)
	go s.run()
	if cfg.ACL != nil {
		if cfg.ACLRecheck <= 0 {
			cfg.ACLRecheck = DefaultACLRecheck
		}
		s.wg.Add(1)
		go s.recheckLoop(cfg.ACLRecheck)
	}
	return s, nil
}

// GRPC is the server's gRPC server; register other services before Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve accepts connections on l until Stop. It may run for several
// listeners at once (TCP and unix sockets). Streams on a listener from
// ListenAlloc are bound to its allocation; on any other listener they are
// trusted as the host (see hostGrant).
func (s *Server) Serve(l net.Listener) error {
	if err := s.grpc.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("failed to serve xDS on %s: %w", l.Addr(), err)
	}
	return nil
}

// Stop unsubscribes, stops the reconciler, ends every xDS stream and stops
// the gRPC server gracefully (forcibly after a grace period).
func (s *Server) Stop() {
	s.stop.Do(func() {
		for _, u := range s.unsubs {
			u()
		}
		s.cancel()
		s.wg.Wait()
		s.releaseAll()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(stopGrace):
			s.grpc.Stop()
			<-done
		}
	})
}

// parseVersion reads a response version; unparsable versions are 0.
func parseVersion(v string) uint64 {
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// cpLogger adapts hclog to go-control-plane's logger. Its Info messages
// (stale nonces, new watches) are routine and logged at debug.
type cpLogger struct{ l hclog.Logger }

func (c cpLogger) Debugf(f string, a ...any) {
	if c.l.IsTrace() {
		c.l.Trace(fmt.Sprintf(f, a...))
	}
}

func (c cpLogger) Infof(f string, a ...any) {
	if c.l.IsDebug() {
		c.l.Debug(fmt.Sprintf(f, a...))
	}
}

func (c cpLogger) Warnf(f string, a ...any)  { c.l.Warn(fmt.Sprintf(f, a...)) }
func (c cpLogger) Errorf(f string, a ...any) { c.l.Error(fmt.Sprintf(f, a...)) }
