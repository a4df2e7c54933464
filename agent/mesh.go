package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/consulapi"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/rpc"
)

// meshReadyWait bounds how long an agent waits for the mesh state
// (intentions, other nodes' services) before it starts its allocations
// (a server+client agent) or its registrar (a client agent, whose
// allocations already run); the feed keeps trying after it.
const meshReadyWait = 15 * time.Second

// mesh is the agent's share of the cluster's mesh state: the etcd store
// (servers), the mirror the local control plane reads, and the registrar
// that writes this node's services to the servers (client role).
type mesh struct {
	store     *meshstate.Store
	mirror    *meshstate.Mirror
	registrar *meshstate.Registrar
	cancel    context.CancelFunc
	done      chan struct{}
	// roots identifies the CA roots last applied (rootsKey); ixIndex is
	// the index of the intentions last cached (client-only agents). Both
	// are used by the feed's goroutine after start.
	roots   string
	ixIndex uint64
	// configEntries is the registry of config entries the feed keeps
	// current (newMeshConfig); configIndex is the index of the entries
	// last cached (client-only agents; the feed's goroutine).
	configEntries *configentry.Registry
	configIndex   uint64
	// sweepCancel and sweepDone stop the leader's sweep (servers).
	sweepCancel context.CancelFunc
	sweepDone   chan struct{}
}

// openMeshStore opens the servers' mesh state under prefix (beside the
// scheduler's state) and imports a pre-cluster agent's CA and intentions.
func (a *Agent) openMeshStore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	opts := meshstate.Options{Prefix: prefix, Logger: a.logger.Named("mesh_state")}
	if a.etcdMember != nil {
		opts.DiskCheck = memberDiskCheck(etcdDir(a.cfg.DataDir))
	}
	st := meshstate.Open(cli, opts)
	if err := checkCAImported(ctx, a.cfg.DataDir, startedBefore(a.cfg.DataDir), st.CAStorage()); err != nil {
		return err
	}
	if err := a.importConnectState(ctx, st); err != nil {
		return err
	}
	a.mesh = &mesh{store: st}
	return nil
}

// newMeshCA builds the CA: over etcd on a server (it holds the root keys),
// remote on a client-only agent (keys made here, CSRs signed by servers).
func (a *Agent) newMeshCA() (*ca.Manager, error) {
	cfg := ca.Config{Datacenter: a.cfg.Datacenter, LeafTTL: a.cfg.Connect.LeafTTL,
		MaxAPILeaves: a.cfg.Connect.MaxAPILeaves, LeafIdleTTL: a.cfg.Connect.LeafIdleTTL}
	if a.mesh.store != nil {
		cfg.Storage = a.mesh.store.CAStorage()
	} else {
		cfg.Signer = a.rpcClient
	}
	m, err := ca.New(cfg, a.logger, a.metrics)
	if err != nil {
		return nil, fmt.Errorf("failed to start CA: %w", err)
	}
	if cfg.Signer != nil {
		if err := a.installRemoteRoots(m); err != nil {
			_ = m.Close()
			return nil, err
		}
	}
	a.mesh.roots = rootsKey(m.Roots())
	return m, nil
}

// newMeshIntentions is the local mirror of the cluster's intentions,
// whose writes go to etcd (servers) or through a server (clients).
func (a *Agent) newMeshIntentions() *intention.Store {
	var w intention.Writer
	if a.mesh.store != nil {
		w = a.mesh.store.Intentions()
	} else {
		w = a.rpcClient.ConnectIntentions()
	}
	ix := intention.NewMirror(w, a.cfg.Connect.DefaultIntentionPolicy != "deny", a.logger)
	if a.mesh.store == nil {
		a.restoreIntentions(ix)
	}
	return ix
}

// startMeshFeed starts applying the cluster's mesh state to the local
// control plane: from etcd on a server, through a server otherwise.
// selfNode is this agent's node ID ("" without the client role).
func (a *Agent) startMeshFeed(selfNode string) {
	cp := a.controlPlane
	mc := meshstate.MirrorConfig{Catalog: a.catalog, Intentions: cp.Intentions,
		OnRoots: func(r ca.Roots) { a.applyRoots(cp.CA, r) }, SelfNode: selfNode, Logger: a.logger,
		ConfigEntries: a.mesh.configEntries}
	if a.mesh.store == nil {
		mc.OnIntentions = a.cacheIntentions
		mc.OnConfig = a.cacheConfigEntries
	}
	a.mesh.mirror = meshstate.NewMirror(mc)
	var follow func(context.Context, func(meshstate.Batch) error) error
	if a.rpcClient != nil {
		follow = a.rpcClient.FollowConnect // this client, even once a.rpcClient is cleared
	}
	if a.mesh.store != nil {
		follow = a.mesh.store.Follow
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.mesh.cancel, a.mesh.done = cancel, make(chan struct{})
	go func() {
		defer close(a.mesh.done)
		err := follow(ctx, a.mesh.mirror.Apply)
		if err != nil && !errors.Is(err, context.Canceled) {
			a.logger.Error("mesh state feed stopped", "error", err)
		}
	}()
}

// applyRoots applies the CA roots of a feed batch, unless they are the
// ones last applied: a server reloads its CA from etcd, a client installs
// and caches them.
func (a *Agent) applyRoots(m *ca.Manager, r ca.Roots) {
	key := rootsKey(r)
	if key == a.mesh.roots {
		return
	}
	var err error
	if a.mesh.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = m.Reload(ctx)
		cancel()
	} else if err = m.SetRoots(r); err == nil {
		a.saveRoots(r)
	}
	if err != nil {
		a.logger.Error("failed to apply the cluster's CA roots", "error", err)
		return
	}
	a.mesh.roots = key
}

// rootsKey identifies a set of CA roots: the active root and every root
// ID (a rotation adds or removes one).
func rootsKey(r ca.Roots) string {
	ids := make([]string, 0, len(r.Roots))
	for _, root := range r.Roots {
		ids = append(ids, root.ID)
	}
	sort.Strings(ids)
	return r.ActiveRootID + "|" + strings.Join(ids, ",")
}

// waitMeshReady waits (bounded) for the feed's first whole state.
func (a *Agent) waitMeshReady() {
	select {
	case <-a.mesh.mirror.Ready():
	case <-time.After(meshReadyWait):
		a.logger.Warn("no mesh state from the servers yet; going on without it", "waited", meshReadyWait.String())
	}
}

// newRegistrar is where the client role registers its services. An
// allocation cl runs is live: anti-entropy leaves its registrations on
// the servers while its services hook has not registered them again.
func (a *Agent) newRegistrar(cl *client.Client) *meshstate.Registrar {
	var w meshstate.CatalogWriter = rpcCatalogWriter{c: a.rpcClient}
	if a.mesh.store != nil {
		w = nodeCatalogWriter{st: a.mesh.store, node: cl.Node().ID}
	}
	a.mesh.registrar = meshstate.NewRegistrar(meshstate.RegistrarConfig{Catalog: a.catalog, Writer: w,
		Mirror: a.mesh.mirror, Live: allocLive(cl), Logger: a.logger})
	return a.mesh.registrar
}

// allocLive reports whether cl runs an allocation (restored or not) that
// is not terminal.
func allocLive(cl *client.Client) func(allocID string) bool {
	return func(allocID string) bool {
		alloc, err := cl.Alloc(allocID)
		return err == nil && alloc != nil && alloc.ID == allocID && !alloc.TerminalStatus()
	}
}

// stopMesh stops the leader's sweep, the registrar and the feed
// (registrations stay in etcd: a restarted agent finds them, anti-entropy
// repairs the difference). The agent calls it right after the client
// role stopped, before the RPC client and the store are closed.
func (a *Agent) stopMesh() {
	if a.mesh == nil {
		return
	}
	if a.mesh.sweepCancel != nil {
		a.mesh.sweepCancel()
		<-a.mesh.sweepDone
		a.mesh.sweepCancel = nil
	}
	if a.mesh.registrar != nil {
		a.mesh.registrar.Stop()
	}
	if a.mesh.cancel != nil {
		a.mesh.cancel()
		<-a.mesh.done
		a.mesh.cancel = nil
	}
}

// localProxy tells the proxies this agent's xDS server serves: its own
// node's (none before the client role knows its node, none on a server
// without the client role).
func (a *Agent) localProxy(inst catalog.ServiceInstance) bool {
	id, _ := a.localNode.Load().(string)
	return id != "" && inst.NodeID == id
}

// nodeDown removes a down node's services from the mesh (server leader).
func (a *Agent) nodeDown(nodeID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := a.mesh.store.DeleteNode(ctx, nodeID)
	if err != nil {
		a.logger.Error("failed to remove a down node's services from the mesh", "node_id", nodeID, "error", err)
		return
	}
	a.logger.Info("removed a down node's services from the mesh", "node_id", nodeID, "allocations", n)
}

// nodeAddress is the address this node's services are registered at in
// a cluster: the bind address when it is a concrete non-loopback one;
// "" on a lone node (services keep their allocation addresses).
func (a *Agent) nodeAddress() string {
	ip := net.ParseIP(a.cfg.BindAddr)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return ""
	}
	return ip.String()
}

// controlPlaneHost is where the control plane's TCP listeners (xDS on
// 8502, the Consul-shaped API on 8500) bind: loopback always, as Consul's
// client_addr defaults, because they hand out leaf keys to local callers.
func (a *Agent) controlPlaneHost() string {
	if ip := net.ParseIP(a.cfg.BindAddr); ip != nil && ip.IsLoopback() {
		return a.cfg.BindAddr
	}
	return "127.0.0.1"
}

// nodeCatalogWriter writes this node's registrations straight to etcd.
type nodeCatalogWriter struct {
	st   *meshstate.Store
	node string
}

func (w nodeCatalogWriter) PutAlloc(ctx context.Context, allocID string, insts []catalog.ServiceInstance) error {
	return w.st.PutAlloc(ctx, w.node, allocID, insts)
}

func (w nodeCatalogWriter) DeleteAlloc(ctx context.Context, allocID string) error {
	return w.st.DeleteAlloc(ctx, w.node, allocID)
}

// rpcCatalogWriter writes them through a server, with the RPC client the
// agent had when the registrar was built (the agent clears its field at
// stop). A refusal (403, 400) is final for those registrations.
type rpcCatalogWriter struct{ c *rpc.Client }

func (w rpcCatalogWriter) PutAlloc(ctx context.Context, allocID string, insts []catalog.ServiceInstance) error {
	return refused(w.c.PutAllocServices(ctx, allocID, insts))
}

func (w rpcCatalogWriter) DeleteAlloc(ctx context.Context, allocID string) error {
	return refused(w.c.DeleteAllocServices(ctx, allocID))
}

// refused wraps the servers' permanent refusals as meshstate.ErrRefused.
func refused(err error) error {
	if errors.Is(err, rpc.ErrForbidden) || errors.Is(err, rpc.ErrBadRequest) {
		return fmt.Errorf("%w: %w", meshstate.ErrRefused, err)
	}
	return err
}

// connectBackend serves client agents' mesh calls on the RPC port: the
// etcd store, and the CA for CSRs.
type connectBackend struct {
	*meshstate.Store
	ca *ca.Manager
}

// The servers sign leaves for services linked to a terminating gateway
// only in its config entry: they read the stored entries.
var _ rpc.ConfigEntriesReader = connectBackend{}

// External registrations are authorized against the service stored
// where a write lands: the servers read it.
var _ rpc.NodeRegsReader = connectBackend{}

// Follow relays the feed to a client agent with FollowFeed: when this
// server's etcd fails (its member lost the cluster) the stream ends and
// the client follows another server, rather than keeping stale state
// behind the stream's keepalives while this one waits for etcd.
func (b connectBackend) Follow(ctx context.Context, fn func(meshstate.Batch) error) error {
	return b.Store.FollowFeed(ctx, fn)
}

func (b connectBackend) Roots(context.Context) (ca.Roots, error) { return b.ca.Roots(), nil }

func (b connectBackend) SignCSR(ctx context.Context, service, csrPEM string) (ca.SignedCert, error) {
	return b.ca.SignCSR(ctx, service, csrPEM)
}

// externalCatalogWriter is where /v1/catalog/register stores services
// outside the mesh: the servers' store on a server agent, a call through a
// server on a client-only agent (with the caller's token); either way they
// persist and reach every agent's catalog through the feed.
func (a *Agent) externalCatalogWriter() consulapi.CatalogWriter {
	if a.mesh != nil && a.mesh.store != nil {
		return a.mesh.store
	}
	if a.rpcClient == nil {
		return nil // a lone control plane: into its catalog
	}
	return a.rpcClient.ExternalCatalog()
}
