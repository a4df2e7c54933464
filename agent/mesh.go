package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
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
}

// openMeshStore opens the servers' mesh state under prefix (beside the
// scheduler's state) and imports a pre-cluster agent's CA and intentions.
func (a *Agent) openMeshStore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	opts := meshstate.Options{Prefix: prefix, Logger: a.logger.Named("mesh_state")}
	if a.etcdMember != nil {
		opts.DiskCheck = memberDiskCheck(etcdDir(a.cfg.DataDir))
	}
	st := meshstate.Open(cli, opts)
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
	return intention.NewMirror(w, a.cfg.Connect.DefaultIntentionPolicy != "deny", a.logger)
}

// startMeshFeed starts applying the cluster's mesh state to the local
// control plane: from etcd on a server, through a server otherwise.
// selfNode is this agent's node ID ("" without the client role).
func (a *Agent) startMeshFeed(selfNode string) {
	cp := a.controlPlane
	onRoots := func(r ca.Roots) {
		var err error
		if a.mesh.store != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = cp.CA.Reload(ctx)
			cancel()
		} else if err = cp.CA.SetRoots(r); err == nil {
			a.saveRoots(r)
		}
		if err != nil {
			a.logger.Error("failed to apply the cluster's CA roots", "error", err)
		}
	}
	a.mesh.mirror = meshstate.NewMirror(meshstate.MirrorConfig{Catalog: a.catalog, Intentions: cp.Intentions,
		OnRoots: onRoots, SelfNode: selfNode, Logger: a.logger})
	follow := a.rpcFollow
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

func (a *Agent) rpcFollow(ctx context.Context, fn func(meshstate.Batch) error) error {
	return a.rpcClient.FollowConnect(ctx, fn)
}

// waitMeshReady waits (bounded) for the feed's first whole state.
func (a *Agent) waitMeshReady() {
	select {
	case <-a.mesh.mirror.Ready():
	case <-time.After(meshReadyWait):
		a.logger.Warn("no mesh state from the servers yet; going on without it", "waited", meshReadyWait.String())
	}
}

// newRegistrar is where the client role registers its services.
func (a *Agent) newRegistrar(nodeID string) *meshstate.Registrar {
	var w meshstate.CatalogWriter = rpcCatalogWriter{a: a}
	if a.mesh.store != nil {
		w = nodeCatalogWriter{st: a.mesh.store, node: nodeID}
	}
	a.mesh.registrar = meshstate.NewRegistrar(meshstate.RegistrarConfig{Catalog: a.catalog, Writer: w,
		Mirror: a.mesh.mirror, Logger: a.logger})
	return a.mesh.registrar
}

// stopMesh stops the registrar and the feed (registrations stay in etcd:
// a restarted agent finds them, anti-entropy repairs the difference).
func (a *Agent) stopMesh() {
	if a.mesh == nil {
		return
	}
	if a.mesh.registrar != nil {
		a.mesh.registrar.Stop()
	}
	if a.mesh.cancel != nil {
		a.mesh.cancel()
		<-a.mesh.done
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

// rpcCatalogWriter writes them through a server.
type rpcCatalogWriter struct{ a *Agent }

func (w rpcCatalogWriter) PutAlloc(ctx context.Context, allocID string, insts []catalog.ServiceInstance) error {
	return w.a.rpcClient.PutAllocServices(ctx, allocID, insts)
}

func (w rpcCatalogWriter) DeleteAlloc(ctx context.Context, allocID string) error {
	return w.a.rpcClient.DeleteAllocServices(ctx, allocID)
}

// connectBackend serves client agents' mesh calls on the RPC port: the
// etcd store, and the CA for CSRs.
type connectBackend struct {
	*meshstate.Store
	ca *ca.Manager
}

func (b connectBackend) Roots(context.Context) (ca.Roots, error) { return b.ca.Roots(), nil }

func (b connectBackend) SignCSR(ctx context.Context, service, csrPEM string) (ca.SignedCert, error) {
	return b.ca.SignCSR(ctx, service, csrPEM)
}
