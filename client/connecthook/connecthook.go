// Package connecthook holds the alloc-runner hooks that join an allocation
// to the mesh, after its network namespace exists:
//
//   - the sidecar hook serves the control plane's unix socket inside the
//     allocation directory (a namespace cannot reach the host's loopback),
//     adds NOMAD_UPSTREAM_* to every task's environment, and, where the node
//     runs Envoy, writes each sidecar's bootstrap to its secrets directory;
//   - the services hook registers the allocation's services and sidecar
//     proxies in the catalog at the allocation's address, and deregisters
//     them before tasks are killed and when the allocation stops; a task's
//     own services (a service block inside the task) are registered only
//     while that task runs.
//
// Hooks run one at a time per allocation (see allocrunner.AllocHook).
package connecthook

import (
	"context"
	"fmt"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/checks"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/structs"
)

// SocketServer serves the control plane on per-allocation unix sockets;
// *controlplane.ControlPlane implements it.
type SocketServer interface {
	// ServeAllocSocket serves the allocation's socket; only processes in
	// netnsPath (the allocation's namespace) may connect, as the proxies
	// the allocation runs (registered or not).
	ServeAllocSocket(allocID, path, netnsPath string, proxies []catalog.ServiceInstance) error
	RemoveAllocSocket(allocID string)
}

// Registrar is where the services hook registers an allocation's services
// and sidecar proxies; *catalog.Catalog implements it, and so does
// meshstate.Registrar (the catalog plus the servers' copy).
type Registrar interface {
	Register(inst catalog.ServiceInstance)
	// Deregister removes one instance (a task's service while its task is
	// not running); catalog.ErrNotFound if there is none.
	Deregister(id string) error
	// DeregisterAlloc removes every instance of the allocation.
	DeregisterAlloc(allocID string)
}

// Deps are what the hooks need from the agent.
type Deps struct {
	Sockets    SocketServer
	Catalog    Registrar
	NodeID     string
	Datacenter string
	// NodeAddress is the node's advertised address in a cluster ("" on a
	// lone node): see connect.Placement.
	NodeAddress string
	// NodeName names the node in other agents' catalog answers.
	NodeName string
	// SidecarMode is the agent's `sidecar` setting; EnvoyBinary the envoy
	// found on the node ("" if none).
	SidecarMode string
	EnvoyBinary string
	// ValidateProxy checks a proxy registration the way the xDS server
	// will build it (xds.ValidateProxy); nil skips the check.
	ValidateProxy func(catalog.ServiceInstance) error
	// CheckExec runs script checks in the allocation's tasks, CheckRestart
	// restarts a task for check_restart; nil: script checks stay critical,
	// tasks are not restarted.
	CheckExec    func(allocID string) checks.Execer
	CheckRestart func(allocID string) checks.Restarter
	// SITokens derives each sidecar's service identity token (its
	// x-consul-token towards the xDS server) when ACLs are enabled; nil:
	// sidecars get no token.
	SITokens SITokenSource
}

// Factory returns the hooks for an allocation: sidecar, then services.
func Factory(d Deps) client.HookFactory {
	return func(*structs.Allocation) []allocrunner.AllocHook {
		return []allocrunner.AllocHook{&SidecarHook{d: d}, &ServicesHook{d: d}}
	}
}

func group(a *structs.Allocation) *structs.TaskGroup {
	if a.Job == nil {
		return nil
	}
	return a.Job.LookupTaskGroup(a.TaskGroup)
}

// SidecarHook prepares what sidecars need before any task starts.
type SidecarHook struct{ d Deps }

// Name implements allocrunner.AllocHook.
func (h *SidecarHook) Name() string { return "sidecar" }

// Prerun implements allocrunner.AllocHook.
func (h *SidecarHook) Prerun(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	tg := group(hc.Alloc)
	if tg == nil || len(connect.MeshServices(tg)) == 0 {
		return nil
	}
	if hc.Env == nil {
		hc.Env = map[string]string{}
	}
	for k, v := range connect.UpstreamEnv(tg) {
		hc.Env[k] = v
	}
	sock := connect.SocketPath(hc.AllocDir.SharedDir)
	if err := prepareSocket(sock, hc.Logger); err != nil {
		return fmt.Errorf("failed to place the control plane socket in the allocation: %w", err)
	}
	if err := h.d.Sockets.ServeAllocSocket(hc.Alloc.ID, sock, hc.NetNSPath, connect.ProxyIdentities(hc.Alloc)); err != nil {
		return fmt.Errorf("failed to place the control plane socket in the allocation: %w", err)
	}
	if usesLegacySocket(hc, tg) {
		linkLegacySocket(hc.AllocDir.SharedDir, hc.Logger)
	}
	tokens, err := h.siTokens(ctx, hc, tg)
	if err != nil {
		return fmt.Errorf("failed to derive the sidecars' service identity tokens: %w", err)
	}
	mode, err := connect.ResolveSidecarMode(h.d.SidecarMode, h.d.EnvoyBinary)
	if err != nil {
		return fmt.Errorf("failed to choose the sidecar proxy: %w", err)
	}
	hc.Logger.Info("sidecar proxies prepared", "mode", mode, "socket", sock, "tokens", len(tokens))
	return h.writeBootstraps(hc, tg, mode == connect.SidecarEnvoy, sock, tokens)
}

// writeBootstraps writes secrets/envoy_bootstrap.json for every sidecar
// and gateway that runs Envoy: all of them when allEnvoy (the node's
// sidecar mode is Envoy), and docker sidecars (an Envoy image) always,
// with the control plane socket at the path their container sees. A
// connect_proxy task (sidecar or gateway) also gets
// connect.RuntimeBootstrapFile, the container's bootstrap, in case its
// node runs it as a container (the connect_proxy driver's docker runtime;
// a gateway in host network mode never does).
// Escape-hatch JSON that does not parse fails the allocation here, with a
// message that names the service and the key.
func (h *SidecarHook) writeBootstraps(hc *allocrunner.AllocHookContext, tg *structs.TaskGroup, allEnvoy bool, sock string, tokens map[string]string) error {
	for i, s := range connect.MeshServices(tg) {
		task := connect.ProxyTaskFor(tg, s)
		docker := task != nil && connect.IsDockerSidecar(task)
		auto := task != nil && task.Driver == connect.ProxyDriver
		if !allEnvoy && !docker && !auto {
			continue
		}
		if task == nil {
			return fmt.Errorf("service %q: no sidecar task in group %q", s.Name, tg.Name)
		}
		write := func(file, grpcSock string) error {
			js, err := h.bootstrap(hc, tg, s, i, grpcSock, tokens[s.Name])
			if err != nil {
				return fmt.Errorf("service %q sidecar: %w", s.Name, err)
			}
			if err := hc.AllocDir.WriteSecret(task.Name, file, task.User, js); err != nil {
				return fmt.Errorf("failed to write envoy bootstrap: %w", err)
			}
			return nil
		}
		if docker {
			if err := write("envoy_bootstrap.json", connect.ContainerSocketPath()); err != nil {
				return err
			}
			continue
		}
		if allEnvoy {
			if err := write("envoy_bootstrap.json", sock); err != nil {
				return err
			}
		}
		if auto {
			if err := write(connect.RuntimeBootstrapFile, connect.ContainerSocketPath()); err != nil {
				return err
			}
		}
	}
	return nil
}

// bootstrap is the Envoy bootstrap of service s's sidecar (the i-th mesh
// service) with the control plane at grpcSock.
func (h *SidecarHook) bootstrap(hc *allocrunner.AllocHookContext, tg *structs.TaskGroup, s *structs.Service, i int, grpcSock, token string) ([]byte, error) {
	var pc map[string]any
	if s.Connect.HasSidecar() && s.Connect.SidecarService.Proxy != nil {
		pc = s.Connect.SidecarService.Proxy.Config
	}
	admin, err := connect.ProxyAdminBind(hc.Alloc, tg, s, i)
	if err != nil {
		return nil, err
	}
	return envoy.JSON(envoy.BootstrapConfig{
		ProxyID:     connect.EnvoyNodeID(hc.Alloc.ID, tg.Name, s),
		Cluster:     s.Name,
		AdminBind:   admin,
		GRPCAddr:    "unix://" + grpcSock,
		Datacenter:  h.d.Datacenter,
		ProxyConfig: pc,
		Token:       token,
	})
}

// Postrun implements allocrunner.AllocHook: the control plane stops
// serving the allocation's socket, and a socket a previous agent left
// there (a restored allocation that ended) is removed too.
func (h *SidecarHook) Postrun(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	h.d.Sockets.RemoveAllocSocket(hc.Alloc.ID)
	if hc.AllocDir == nil {
		return nil
	}
	if err := removeStaleSocket(connect.SocketPath(hc.AllocDir.SharedDir)); err != nil {
		return fmt.Errorf("failed to remove the control plane socket: %w", err)
	}
	return nil
}

// Destroy implements allocrunner.AllocHook.
func (h *SidecarHook) Destroy(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	return h.Postrun(ctx, hc)
}
