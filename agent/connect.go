package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/connecthook"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/structs"
	"github.com/meshlet/meshlet/xds"
)

// startControlPlane starts the CA, intentions, authz, xDS and the
// Consul-shaped API over the agent's catalog, before the client role so
// that recovered allocations find their sockets served again.
func (a *Agent) startControlPlane() error {
	a.metrics = prometheus.NewRegistry()
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.mesh == nil { // a client-only agent: the servers hold the state
		a.mesh = &mesh{}
		if _, err := a.serverConn(); err != nil {
			return err
		}
	}
	caMgr, err := a.newMeshCA()
	if err != nil {
		return err
	}
	configEntries, configWriter := a.newMeshConfig()
	httpTLS, err := a.httpServerTLS()
	if err != nil {
		_ = caMgr.Close()
		return err
	}
	var aclRes controlplane.ACLResolver // a nil interface, never a typed nil
	if res, err := a.aclResolver(); err != nil {
		_ = caMgr.Close()
		return err
	} else if res != nil {
		aclRes = res
	}
	cp, err := controlplane.New(controlplane.Config{
		CA:           caMgr,
		Intentions:   a.newMeshIntentions(),
		NodeAddress:  a.nodeAddress(),
		LocalProxy:   a.localProxy,
		RotateCA:     a.meshRotateCA(caMgr),
		Datacenter:   a.cfg.Datacenter,
		NodeName:     a.cfg.NodeName,
		DefaultAllow: a.cfg.Connect.DefaultIntentionPolicy != "deny",
		LeafTTL:      a.cfg.Connect.LeafTTL,
		MaxAPILeaves: a.cfg.Connect.MaxAPILeaves,
		LeafIdleTTL:  a.cfg.Connect.LeafIdleTTL,
		GRPCAddr:     net.JoinHostPort(a.controlPlaneHost(), strconv.Itoa(a.cfg.Ports.GRPC)),
		HTTPAddr:     net.JoinHostPort(a.controlPlaneHost(), strconv.Itoa(a.cfg.Ports.ConnectHTTP)),
		HTTPPolicy:   a.httpPolicy(),
		HTTPTLS:      httpTLS,
		StopGrace:    shutdownTimeout,
		Logger:       a.logger,
		Registerer:   a.metrics,

		ConfigEntries: configEntries, ConfigWriter: configWriter,
		CatalogWriter: a.externalCatalogWriter(),
		ACL:           aclRes,
	}, a.catalog)
	if err != nil {
		_ = caMgr.Close()
		return fmt.Errorf("failed to build control plane: %w", err)
	}
	if err := cp.Start(); err != nil {
		_ = cp.Stop() // nothing was served
		return err
	}
	a.controlPlane = cp
	a.envoyBinary = a.findEnvoy()
	if !a.cfg.Cluster.Client {
		a.startMeshFeed("")
	}
	return nil
}

// findEnvoy returns the envoy binary sidecars may run, or "".
func (a *Agent) findEnvoy() string {
	if a.cfg.Sidecar == SidecarBuiltin {
		return ""
	}
	bin, err := envoy.FindBinary(a.cfg.EnvoyBinary)
	if err != nil {
		if a.cfg.Sidecar == SidecarEnvoy || !errors.Is(err, envoy.ErrEnvoyNotFound) || a.cfg.EnvoyBinary != "" {
			a.logger.Warn("no usable envoy binary; sidecars that need Envoy will fail", "error", err)
		} else {
			a.logger.Info("no envoy binary found; sidecars run the built-in proxy")
		}
		return ""
	}
	return bin
}

// connectAttributes are the node attributes the injected sidecar task uses,
// and the ports the scheduler must never give a job.
func (a *Agent) connectAttributes() map[string]string {
	attrs := map[string]string{
		"meshlet.sidecar":                a.cfg.Sidecar,
		"meshlet.envoy_binary":           a.envoyBinary,
		scheduler.ReservedPortsAttribute: a.reservedPorts(),
	}
	if addr := a.nodeAddress(); addr != "" {
		attrs["unique.network.ip-address"] = addr // port mappings show it
	}
	return attrs
}

// connectHooks is the hook factory joining allocations to the mesh.
func (a *Agent) connectHooks() client.HookFactory {
	return func(alloc *structs.Allocation) []allocrunner.AllocHook {
		return connecthook.Factory(connecthook.Deps{
			Sockets: a.controlPlane, Catalog: a.mesh.registrar, NodeID: a.client.Node().ID, NodeAddress: a.nodeAddress(),
			NodeName: a.client.Node().Name, CheckExec: a.checkExec, CheckRestart: a.checkRestart,
			Datacenter: a.cfg.Datacenter, SidecarMode: a.cfg.Sidecar, EnvoyBinary: a.envoyBinary, SITokens: a.siTokenSource(),
			ValidateProxy: func(inst catalog.ServiceInstance) error {
				return xds.ValidateProxy(inst, a.cfg.Datacenter, a.controlPlane.CA.TrustDomain())
			},
		})(alloc)
	}
}

// ControlPlane is the embedded mesh control plane (nil before Start).
func (a *Agent) ControlPlane() *controlplane.ControlPlane { return a.controlPlane }
