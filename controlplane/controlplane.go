// Package controlplane composes meshlet's embedded service-mesh control
// plane: the CA, the intentions store, the ext_authz service, the xDS
// server (gRPC on 127.0.0.1:8502 and one unix socket per allocation) and the
// Consul-shaped HTTP API (127.0.0.1:8500). It reads the catalog, which the
// client fills, and never reaches into the client.
//
// Trust: the TCP listeners are host-local and trusted as the host (no ACLs
// yet); an allocation's socket is bound to that allocation, whose xDS
// streams may only act as its own sidecar proxies (see package xds). Start and Stop are not
// safe to call concurrently; everything else is.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/consulapi"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/xds"
)

// maxSocketPath is the longest unix socket path the kernel accepts
// (sizeof(sun_path) - 1).
const maxSocketPath = 107

// defaultStopGrace is how long Stop waits for HTTP requests in flight.
const defaultStopGrace = 5 * time.Second

// ErrSocketPathTooLong is returned when an allocation's socket path does
// not fit in a unix socket address.
var ErrSocketPathTooLong = errors.New("control plane socket path too long")

// Config configures the control plane.
type Config struct {
	// DataDir holds the CA's and the intentions' persisted state.
	DataDir    string
	Datacenter string
	NodeName   string
	// DefaultAllow is the intentions default policy (allow in dev mode).
	DefaultAllow bool
	LeafTTL      time.Duration
	// MaxAPILeaves and LeafIdleTTL bound the leaves minted only for API
	// callers (ca.Config; zero: the CA's defaults).
	MaxAPILeaves int
	LeafIdleTTL  time.Duration
	// GRPCAddr is the xDS/ext_authz TCP listener ("127.0.0.1:8502"; port 0 picks one).
	GRPCAddr string
	// HTTPAddr is the Consul-shaped API listener ("127.0.0.1:8500"; port 0 picks one).
	HTTPAddr string
	// HTTPPolicy says which Host and Origin headers the HTTP API accepts
	// (the zero value: loopback names and addresses only, no cross-origin
	// request); see httpsrv.Policy.
	HTTPPolicy httpsrv.Policy
	// HTTPTLS, when set, makes the HTTP listener serve HTTPS with it (the
	// agent's tls { http = true }).
	HTTPTLS *tls.Config
	// StopGrace bounds how long Stop waits for HTTP requests in flight
	// (default 5s).
	StopGrace  time.Duration
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// ConfigEntries holds the L7 config entries the xDS server compiles
	// into discovery chains and the Consul-shaped API serves (nil: a new
	// empty registry). ConfigWriter writes them for the API (an agent
	// passes its cluster's: the servers' store or a call through a
	// server); nil: the API writes into ConfigEntries, in memory.
	ConfigEntries *configentry.Registry
	ConfigWriter  consulapi.ConfigWriter
	// CatalogWriter stores /v1/catalog/register's registrations (an
	// agent's: the servers' store); nil: into the catalog, in memory.
	CatalogWriter consulapi.CatalogWriter
	// CA and Intentions, when set, are used instead of the ones DataDir
	// would hold: an agent in a cluster passes its etcd-backed or remote
	// CA and its mirror of the cluster's intentions. The control plane
	// closes the CA at Stop.
	CA         *ca.Manager
	Intentions *intention.Store
	// NodeAddress is the node's address in the Consul-shaped catalog
	// answers (default 127.0.0.1).
	NodeAddress string
	// LocalProxy tells the proxies of this node (xds.Config.LocalProxy);
	// nil: every proxy in the catalog.
	LocalProxy func(catalog.ServiceInstance) bool
	// RotateCA rotates the cluster's CA root for the Consul-shaped API's
	// PUT /v1/connect/ca/configuration (consulapi.Deps.RotateCA): a
	// server's CA, or a call through a server on a client agent.
	RotateCA func(ctx context.Context) error
	// ACL, when set (acl { enabled = true }), resolves request tokens:
	// the Consul-shaped API and the xDS host listener enforce them. A nil
	// interface value disables ACLs; never pass a typed nil.
	ACL ACLResolver
}

// ACLResolver resolves a request's token secret (acl.Resolver).
type ACLResolver interface {
	Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error)
}

// ControlPlane is the running control plane.
type ControlPlane struct {
	cfg        Config
	log        hclog.Logger
	Catalog    *catalog.Catalog
	CA         *ca.Manager
	Intentions *intention.Store
	Authz      *authz.Service
	XDS        *xds.Server

	api      *consulapi.Server
	httpSrv  *httpsrv.Server
	grpcAddr net.Addr
	httpAddr net.Addr

	mu      sync.Mutex
	sockets map[string]net.Listener // by alloc ID
	wg      sync.WaitGroup
}

// New builds the control plane over cat. Nothing listens until Start.
func New(cfg Config, cat *catalog.Catalog) (*ControlPlane, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Datacenter == "" {
		cfg.Datacenter = "dc1"
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = defaultStopGrace
	}
	log := cfg.Logger.Named("controlplane")
	caMgr, ix, err := openStores(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ConfigEntries == nil {
		cfg.ConfigEntries = configentry.NewRegistry()
	}
	az := authz.New(caMgr, ix, cfg.Logger, cfg.Registerer)
	reg := cfg.ConfigEntries
	az.SetProtocols(func(svc string) string {
		set, _ := reg.Current()
		return set.Protocol(svc)
	})
	xs, err := xds.NewServer(xds.Config{
		Catalog: cat, Certs: caMgr, Datacenter: cfg.Datacenter,
		Logger: cfg.Logger, Registerer: cfg.Registerer, LocalProxy: cfg.LocalProxy,
		ConfigEntries: cfg.ConfigEntries, ACL: cfg.ACL, AuthzEpoch: az,
	})
	if err != nil {
		_ = caMgr.Close()
		return nil, fmt.Errorf("failed to build xDS server: %w", err)
	}
	az.Register(xs.GRPC())
	return &ControlPlane{
		cfg: cfg, log: log, Catalog: cat, CA: caMgr, Intentions: ix, Authz: az, XDS: xs,
		sockets: map[string]net.Listener{},
	}, nil
}

// openStores returns the configured CA and intentions, or opens them in
// DataDir (in memory without one).
func openStores(cfg Config) (*ca.Manager, *intention.Store, error) {
	caDir, ixDir := "", ""
	if cfg.DataDir != "" {
		caDir, ixDir = filepath.Join(cfg.DataDir, "ca"), filepath.Join(cfg.DataDir, "intentions")
	}
	caMgr := cfg.CA
	if caMgr == nil {
		var err error
		caMgr, err = ca.New(ca.Config{Dir: caDir, Datacenter: cfg.Datacenter, LeafTTL: cfg.LeafTTL,
			MaxAPILeaves: cfg.MaxAPILeaves, LeafIdleTTL: cfg.LeafIdleTTL}, cfg.Logger, cfg.Registerer)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to start CA: %w", err)
		}
	}
	if cfg.Intentions != nil {
		return caMgr, cfg.Intentions, nil
	}
	ix, err := intention.New(ixDir, cfg.DefaultAllow, cfg.Logger)
	if err != nil {
		_ = caMgr.Close()
		return nil, nil, fmt.Errorf("failed to open intentions: %w", err)
	}
	return caMgr, ix, nil
}

// Start opens the gRPC and HTTP listeners.
func (c *ControlPlane) Start() error {
	gl, err := net.Listen("tcp", c.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("failed to listen for gRPC on %s: %w", c.cfg.GRPCAddr, err)
	}
	hl, err := net.Listen("tcp", c.cfg.HTTPAddr)
	if err != nil {
		gl.Close()
		return fmt.Errorf("failed to listen for the connect API on %s: %w", c.cfg.HTTPAddr, err)
	}
	c.grpcAddr, c.httpAddr = gl.Addr(), hl.Addr()
	if c.cfg.HTTPTLS != nil {
		hl = tls.NewListener(hl, c.cfg.HTTPTLS)
	}
	c.api = consulapi.NewServer(consulapi.Deps{
		Catalog: c.Catalog, CA: c.CA, Intentions: c.Intentions, Authz: c.Authz,
		Datacenter: c.cfg.Datacenter, NodeName: c.cfg.NodeName, NodeAddress: c.cfg.NodeAddress,
		RotateCA: c.cfg.RotateCA, ConfigEntries: c.cfg.ConfigEntries, ConfigWriter: c.cfg.ConfigWriter,
		CatalogWriter: c.cfg.CatalogWriter,
	}, c.cfg.Logger, c.apiOptions()...)
	policy := c.cfg.HTTPPolicy
	if policy.Logger == nil {
		policy.Logger = c.log.Named("http")
	}
	c.httpSrv = httpsrv.New(httpsrv.Protect(c.api.Handler(), policy))
	c.httpSrv.HTTP().ErrorLog = policy.Logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	c.serve("grpc", func() error { return c.XDS.Serve(gl) })
	c.serve("http", func() error { return c.httpSrv.Serve(hl) })
	c.log.Info("control plane started", "grpc_addr", gl.Addr().String(), "http_addr", hl.Addr().String(),
		"trust_domain", c.CA.TrustDomain())
	return nil
}

// apiOptions are the Consul-shaped API's options: token enforcement when
// the agent runs with ACLs.
func (c *ControlPlane) apiOptions() []consulapi.Option {
	if c.cfg.ACL == nil {
		return nil
	}
	return []consulapi.Option{consulapi.WithACL(c.cfg.ACL)}
}

func (c *ControlPlane) serve(what string, fn func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			c.log.Error("listener stopped", "listener", what, "error", err)
		}
	}()
}

// GRPCAddr is the xDS/ext_authz listener's address.
func (c *ControlPlane) GRPCAddr() string { return addrString(c.grpcAddr) }

// HTTPAddr is the Consul-shaped API's address.
func (c *ControlPlane) HTTPAddr() string { return addrString(c.httpAddr) }

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// ServeAllocSocket serves xDS and ext_authz on a unix socket at path (inside
// an allocation's directory) until RemoveAllocSocket. Idempotent per alloc.
// xDS streams on the socket are bound to allocID: they may only act as a
// connect proxy the catalog registers for that allocation and only receive
// that proxy's leaf (xds.Server.ListenAlloc); anything else is refused with
// PermissionDenied. With netnsPath set, only processes inside that network
// namespace (the allocation's) may connect at all, so a task cannot use
// another allocation's socket. proxies are the proxies the allocation's
// job runs (connect.ProxyIdentities): the socket accepts them, and checks
// for their services, while the catalog does not hold them (after an
// agent restart, before they are registered again; during the group's
// shutdown_delay, after they were deregistered). ext_authz checks through
// the socket are limited to the services its proxies front.
func (c *ControlPlane) ServeAllocSocket(allocID, path, netnsPath string, proxies []catalog.ServiceInstance) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sockets[allocID]; ok {
		return nil
	}
	if len(path) > maxSocketPath {
		return fmt.Errorf("%w: %s is %d bytes, over the kernel's %d; use a shorter data_dir", ErrSocketPathTooLong, path, len(path), maxSocketPath)
	}
	l, err := c.XDS.ListenAlloc(allocID, path, xds.WithPeerNetNS(netnsPath), xds.WithAllocProxies(proxies))
	if err != nil {
		return fmt.Errorf("failed to serve control plane socket %s: %w", path, err)
	}
	c.sockets[allocID] = l
	c.serve("unix", func() error { return c.XDS.Serve(l) })
	return nil
}

// RemoveAllocSocket stops serving an allocation's socket, closes the
// connections made through it (a stopped allocation keeps no xDS stream)
// and removes it.
func (c *ControlPlane) RemoveAllocSocket(allocID string) {
	c.mu.Lock()
	l, ok := c.sockets[allocID]
	delete(c.sockets, allocID)
	c.mu.Unlock()
	if ok {
		path := l.Addr().String()
		_ = l.Close()
		_ = os.Remove(path)
	}
}

// Stop shuts everything down: blocking queries end at once, other HTTP
// requests get StopGrace to finish and are cut after it (the error says
// so): every request's context is cancelled by the time Stop returns.
func (c *ControlPlane) Stop() error {
	var err error
	if c.httpSrv != nil {
		c.api.Close()
		if err = c.httpSrv.Stop(c.cfg.StopGrace); err != nil {
			err = fmt.Errorf("failed to stop the connect API: %w", err)
		}
	}
	c.XDS.Stop()
	c.mu.Lock()
	for id, l := range c.sockets {
		_ = l.Close()
		delete(c.sockets, id)
	}
	c.mu.Unlock()
	c.wg.Wait()
	_ = c.CA.Close()
	return err
}
