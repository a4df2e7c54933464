// Package agent composes meshlet's roles into one process: the server role
// (state store, scheduler, job admission), the client role (drivers, CNI
// networking, alloc runners) and the HTTP API, plus the service catalog the
// control plane reads. In dev mode both roles run in one process but talk
// only through server.Server's client-facing methods (client.ServerConn).
//
// Concurrency: Start and Shutdown must not run concurrently with each other;
// every other method is safe for concurrent use once Start returned.
package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Version is meshlet's version, reported as the meshlet.version attribute.
const Version = "0.1.0"

// shutdownTimeout bounds the HTTP server's graceful shutdown.
const shutdownTimeout = 10 * time.Second

// Agent is a running meshlet agent.
type Agent struct {
	cfg    *Config
	logger hclog.Logger

	catalog *catalog.Catalog
	store   state.Store
	// etcdMember is the embedded etcd member, etcdClient the client of an
	// external cluster (one of them, see etcd.go).
	etcdMember *etcdembed.Member
	etcdClient *clientv3.Client
	etcdURLs   []string // the embedded member's client and peer URLs
	lead       *server.EtcdLeadership
	// rpcLn and rpcSrv are a server's RPC port; rpcClient is a
	// client-only agent's connection to its servers.
	rpcLn     net.Listener
	rpcSrv    *rpc.Server
	rpcClient *rpc.Client
	// acl is the ACL system, nil while ACLs are disabled (acl.go).
	acl     *aclSystem
	server  *server.Server
	client  *client.Client
	backend *Backend
	// cleanups run in reverse order at Shutdown (driver plugins...).
	cleanups []func()

	apiSrv   *api.Server
	httpSrv  *httpsrv.Server
	httpLn   net.Listener
	httpDone chan struct{}

	controlPlane *controlplane.ControlPlane
	mesh         *mesh
	// localNode is the client role's node ID (a string; unset before it
	// is known): the xDS server serves only this node's proxies.
	localNode   atomic.Value
	envoyBinary string
	metrics     *prometheus.Registry

	mu         sync.Mutex
	started    bool
	tempData   bool
	extraHooks []client.HookFactory
	mutators   []server.JobMutator
}

// New validates cfg and returns an agent; nothing runs until Start.
func New(cfg *Config, logger hclog.Logger) (*Agent, error) {
	if cfg == nil {
		cfg = DevConfig()
	}
	cp := *cfg
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Agent{cfg: &cp, logger: logger.Named("agent"), catalog: catalog.New(),
		mutators: []server.JobMutator{connect.Mutator{Options: cp.Connect.injectOptions()}}}, nil
}

// AddJobMutator adds a server-side job mutator (e.g. sidecar injection);
// call before Start.
func (a *Agent) AddJobMutator(m server.JobMutator) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mutators = append(a.mutators, m)
}

// AddAllocHooks adds alloc hooks that run after the network hook (e.g.
// sidecar, services); call before Start.
func (a *Agent) AddAllocHooks(f client.HookFactory) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extraHooks = append(a.extraHooks, f)
}

// Config returns the agent's configuration (with DataDir resolved after
// Start).
func (a *Agent) Config() Config { return *a.cfg }

// Catalog is the service catalog the control plane reads.
func (a *Agent) Catalog() *catalog.Catalog { return a.catalog }

// Backend is the api.Backend the HTTP API serves.
func (a *Agent) Backend() api.Backend {
	if a.backend == nil {
		return nil
	}
	return a.backend
}

// Server is the server role (nil before Start).
func (a *Agent) Server() *server.Server { return a.server }

// Client is the client role (nil before Start).
func (a *Agent) Client() *client.Client { return a.client }

// HTTPAddr is the HTTP API's actual address ("127.0.0.1:4646").
func (a *Agent) HTTPAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// Start opens the state, starts the server role, then the client role
// (which recovers the tasks of a previous agent), then the HTTP API. On
// error everything started so far is stopped again.
func (a *Agent) Start() (err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("agent already started")
	}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	if err := a.prepareDataDir(); err != nil {
		return err
	}
	if err := checkConnectState(a.cfg.DataDir, startedBefore(a.cfg.DataDir)); err != nil {
		return err
	}
	if a.cfg.Cluster.Server {
		if err := a.listenRPC(); err != nil {
			return err
		}
		if err := a.startServer(); err != nil {
			return err
		}
	}
	if err := a.startControlPlane(); err != nil {
		return err
	}
	if err := a.listenHTTP(); err != nil {
		return err
	}
	if a.cfg.Cluster.Client {
		if err := a.startClient(); err != nil {
			return err
		}
	}
	a.backend = &Backend{server: a.server, client: a.client, members: a.memberView(), store: a.store, catalog: a.catalog}
	if err := a.startHTTP(); err != nil {
		return err
	}
	if a.server != nil {
		if err := a.serveRPC(); err != nil {
			return err
		}
	}
	a.started = true
	a.logger.Info("agent started", "http_addr", a.HTTPAddr(), "rpc_addr", a.RPCAddr(), "data_dir", a.cfg.DataDir,
		"server", a.server != nil, "client", a.client != nil)
	return nil
}

func (a *Agent) prepareDataDir() error {
	if a.cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "meshlet-dev-")
		if err != nil {
			return fmt.Errorf("failed to create dev data dir: %w", err)
		}
		// MkdirTemp makes 0700; tasks running as another user (user =
		// "nobody") must traverse it to reach their own directories.
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("failed to open up dev data dir: %w", err)
		}
		a.cfg.DataDir, a.tempData = dir, true
	}
	abs, err := filepath.Abs(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("failed to resolve data dir: %w", err)
	}
	a.cfg.DataDir = abs
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("failed to create data dir: %w", err)
	}
	return nil
}

func (a *Agent) startServer() error {
	// The marker sits outside server/, so losing that whole directory is
	// refused too instead of starting a new cluster.
	st, lead, err := a.openServerState()
	if err != nil {
		return err
	}
	a.lead = lead
	a.store = st
	sched, err := scheduler.New(scheduler.Config{MinDynamicPort: a.cfg.Client.MinDynamicPort,
		MaxDynamicPort: a.cfg.Client.MaxDynamicPort}, a.logger.Named("scheduler"))
	if err != nil {
		return err
	}
	mutators := a.mutators
	if a.mesh != nil && a.mesh.store != nil {
		// Ingress gateways' config entries are written at registration,
		// as Nomad writes them to Consul.
		mutators = append(slices.Clone(mutators), connect.EntryMutator{Writer: a.mesh.store})
	}
	srv, err := server.New(server.Config{Store: st, Scheduler: sched, Mutators: mutators,
		Admission:   server.AdmissionFuncs{CanonicalizeFunc: jobspecs.Canonicalize, ValidateFunc: a.validateJob},
		Logger:      a.logger.Named("server"),
		MaxJobCount: a.cfg.Server.JobMaxCount, MaxJobSize: a.cfg.Server.JobMaxSize,
		EvalGCThreshold: a.cfg.Server.EvalGCThreshold, AllocGCThreshold: a.cfg.Server.AllocGCThreshold,
		NodeGCThreshold: a.cfg.Server.NodeGCThreshold,
		GCInterval:      a.cfg.Server.GCInterval, Leadership: lead, NodeDown: a.nodeDown,
		MinHeartbeatTTL: a.cfg.Cluster.MinHeartbeatTTL, HeartbeatGrace: a.cfg.Cluster.HeartbeatGrace})
	if err != nil {
		return err
	}
	a.server = srv
	a.startSITokens()
	a.startMeshSweep()
	return nil
}

func (a *Agent) startClient() error {
	drivers, cleanup, err := a.loadDrivers()
	if err != nil {
		return err
	}
	if cleanup != nil {
		a.cleanups = append(a.cleanups, cleanup)
	}
	networker, why := a.newNetworker()
	hooks := append([]client.HookFactory{a.connectHooks()}, a.extraHooks...)
	conn, err := a.serverConn()
	if err != nil {
		return err
	}
	cl, err := client.New(client.Config{
		DataDir: a.cfg.DataDir, NodeName: a.cfg.NodeName, Datacenter: a.cfg.Datacenter, NodeMeta: a.cfg.Client.Meta,
		Drivers: drivers, Networker: networker, NetworkUnavailable: why, Server: conn, HTTPAddr: a.HTTPAddr(), HTTPTLS: a.cfg.TLS.HTTP,
		Reserved: a.reservedResources(), TemplateCatalog: a.catalog,
		Version: Version, BinaryPath: a.cfg.BinaryPath, Logger: a.logger.Named("client"),
		GCInterval: a.cfg.Client.GCInterval, GCMaxAllocs: a.cfg.Client.GCMaxAllocs, GCAllocTTL: a.cfg.Client.GCAllocTTL,
		GCDiskUsageThreshold: a.cfg.Client.GCDiskUsageThreshold, MaxKillTimeout: a.cfg.Client.MaxKillTimeout,
		Attributes: a.connectAttributes(),
		Hooks: func(alloc *structs.Allocation) []allocrunner.AllocHook {
			var out []allocrunner.AllocHook
			for _, f := range hooks {
				out = append(out, f(alloc)...)
			}
			return out
		},
	})
	if err != nil {
		return err
	}
	a.client = cl
	a.localNode.Store(cl.Node().ID)
	a.startMeshFeed(cl.Node().ID)
	if a.mesh.store != nil {
		a.waitMeshReady() // from etcd: at once
	}
	reg := a.newRegistrar(cl)
	if err := cl.Start(); err != nil {
		return err
	}
	if a.mesh.store == nil {
		// Through a server, once the node is registered: allocations
		// already run (their sidecars wait for their leaves); the
		// registrar starts from a whole state.
		a.waitMeshReady()
	}
	reg.Start()
	return nil
}

// listenHTTP opens the HTTP API's listener before the client role starts,
// so that its port is known and reserved on the node.
func (a *Agent) listenHTTP() error {
	addr := net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.Ports.HTTP))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	if ln, err = a.wrapHTTPListener(ln); err != nil {
		_ = ln.Close()
		return err
	}
	a.httpLn = ln
	return nil
}

func (a *Agent) startHTTP() error {
	ln := a.httpLn
	name := a.cfg.NodeName
	if a.client != nil {
		name = a.client.Node().Name
	}
	a.apiSrv = api.NewServer(a.backend, a.logger, api.WithAgentInfo(api.AgentInfo{NodeName: name, Region: a.cfg.Region,
		Datacenter: a.cfg.Datacenter, Version: Version}),
		api.WithMetricsHandler(promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{})), a.apiACLOption())
	handler := a.apiSrv.Handler()
	if a.server == nil {
		var err error
		if handler, err = a.forwardToServers(handler); err != nil {
			return err
		}
	}
	if a.server != nil {
		var err error
		if handler, err = a.toAllocNode(handler); err != nil {
			return err
		}
		if handler, err = a.toLeader(handler); err != nil {
			return err
		}
	}
	a.httpSrv = httpsrv.New(httpsrv.Protect(handler, a.httpPolicy()))
	// TLS handshake failures (a client without the CA or a certificate)
	// are the client's to report; the agent keeps them at debug.
	a.httpSrv.HTTP().ErrorLog = a.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	a.httpDone = make(chan struct{})
	go func() {
		defer close(a.httpDone)
		if err := a.httpSrv.Serve(ln); err != nil {
			a.logger.Error("HTTP server stopped", "error", err)
		}
	}()
	return nil
}

// Shutdown stops the HTTP API and the runners WITHOUT killing tasks: they
// keep running and the next agent on the same data dir recovers them.
// Stopping allocations is a job stop, not a shutdown.
func (a *Agent) Shutdown() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		return nil
	}
	a.started = false
	return a.stop()
}

// stop tears down whatever Start created, in reverse order.
func (a *Agent) stop() error {
	var errs []error
	if a.apiSrv != nil {
		a.apiSrv.Close() // ends blocking queries, log follows and exec sessions
	}
	if a.httpSrv != nil {
		if err := a.httpSrv.Stop(shutdownTimeout); err != nil {
			errs = append(errs, fmt.Errorf("failed to stop the HTTP API: %w", err))
		}
		<-a.httpDone
		a.httpSrv = nil
	} else if a.httpLn != nil {
		_ = a.httpLn.Close()
	}
	if a.client != nil {
		if err := a.client.Shutdown(); err != nil {
			errs = append(errs, err)
		}
		a.client = nil
	}
	// The registrar and the feed write and read through the RPC client
	// and the store: stop them before either is closed.
	a.stopMesh()
	a.stopACL()
	if a.rpcClient != nil {
		_ = a.rpcClient.Close()
		a.rpcClient = nil
	}
	if a.rpcSrv != nil {
		_ = a.rpcSrv.Close()
		a.rpcSrv = nil
	} else if a.rpcLn != nil {
		_ = a.rpcLn.Close()
	}
	if a.controlPlane != nil {
		if err := a.controlPlane.Stop(); err != nil {
			errs = append(errs, err)
		}
		a.controlPlane = nil
	}
	for i := len(a.cleanups) - 1; i >= 0; i-- {
		a.cleanups[i]()
	}
	a.cleanups = nil
	if a.server != nil {
		a.server.Shutdown() // follow-up timers must not fire into a closed store
	}
	if a.store != nil {
		if err := a.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("failed to close state store: %w", err))
		}
		a.store = nil
	}
	if err := a.closeEtcd(); err != nil {
		errs = append(errs, err)
	}
	a.logger.Info("agent stopped")
	return errors.Join(errs...)
}
