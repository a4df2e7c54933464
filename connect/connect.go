// Package connect turns a jobspec's `connect` stanzas into what the mesh
// runs: at registration it injects a `connect-proxy-<service>` sidecar task
// and its public-listener port into the group (as Nomad's job hook does);
// on the client it derives the catalog registrations of an allocation's
// services and proxies, and the NOMAD_UPSTREAM_* environment. Functions here
// are pure: they read and mutate only the values they are given.
//
// Naming follows what Nomad registers in Consul, so existing habits carry
// over: a group service's ID is
// "_nomad-task-<alloc-id>-group-<group>-<service>-<port-label>", its
// sidecar is the service "<service>-sidecar-proxy" with ID
// "<service-id>-sidecar-proxy", and that proxy ID is the Envoy node ID.
package connect

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// ErrInvalid wraps connect configuration that cannot be turned into a proxy.
var ErrInvalid = errors.New("invalid connect configuration")

const (
	// ProxyTaskPrefix prefixes the injected sidecar task's name.
	ProxyTaskPrefix = "connect-proxy-"
	// KindPrefix marks an injected task's Kind, as Nomad does.
	KindPrefix = "connect-proxy:"
	// ProxyUser is the user the built-in proxy of an injected sidecar
	// drops to (it is started as the task's user, root by default, to
	// read the agent's binary wherever it lives).
	ProxyUser = "nobody"
	// SocketName is the control plane's unix socket in an allocation's
	// shared alloc/run directory (SocketDir); the sidecar reaches xDS and
	// ext_authz through it from inside the network namespace.
	SocketName = "meshlet_grpc.sock"
	// SocketDir is the directory of the allocation's shared alloc/ dir
	// that holds meshlet's sockets. It is root-owned 0755, so no task can
	// plant a file where the agent listens (alloc/tmp is writable by all).
	SocketDir = "run"
	// AdminBasePort is the first sidecar admin port, bound on 127.0.0.2
	// inside the namespace (one per sidecar of a group).
	AdminBasePort = 19001
)

// Default sidecar resources and timings, as Nomad's.
var (
	DefaultProxyCPU      = 250
	DefaultProxyMemoryMB = 128
	DefaultShutdownDelay = 5 * time.Second
)

// ProxyTaskName is the injected task's name for a service.
func ProxyTaskName(service string) string { return ProxyTaskPrefix + service }

// ProxyPortLabel is the label of a sidecar's public-listener port.
func ProxyPortLabel(service string) string { return ProxyTaskPrefix + service }

// ServiceID is a group service's ID.
func ServiceID(allocID, group, service, portLabel string) string {
	return fmt.Sprintf("_nomad-task-%s-group-%s-%s-%s", allocID, group, service, portLabel)
}

// ProxySuffix ends a sidecar's service ID (see ProxyID) and service name
// (see ProxyServiceName).
const ProxySuffix = "-sidecar-proxy"

// ProxyID is the sidecar proxy's service ID (and Envoy node ID).
func ProxyID(serviceID string) string { return serviceID + ProxySuffix }

// ProxyServiceName is the sidecar's service name.
func ProxyServiceName(service string) string { return service + ProxySuffix }

// SocketPath is where the agent places the control plane's socket for an
// allocation, given the allocation's shared alloc/ directory.
func SocketPath(sharedAllocDir string) string {
	return strings.TrimSuffix(sharedAllocDir, "/") + "/" + SocketDir + "/" + SocketName
}

// ConnectServices returns the group's services that ask for a sidecar.
func ConnectServices(tg *structs.TaskGroup) []*structs.Service {
	var out []*structs.Service
	for _, s := range tg.Services {
		if s.Connect.HasSidecar() {
			out = append(out, s)
		}
	}
	return out
}

// ProxyTask returns the group's sidecar task for a service: the task whose
// Kind is "connect-proxy:<service>", whatever its name (sidecar_task may
// rename it), or nil.
func ProxyTask(tg *structs.TaskGroup, service string) *structs.Task {
	for _, t := range tg.Tasks {
		if t.Kind == KindPrefix+service {
			return t
		}
	}
	return nil
}

// UpstreamEnv returns NOMAD_UPSTREAM_{ADDR,IP,PORT}_<dest> for every
// upstream of the group's sidecars (dashes become underscores, as Nomad).
func UpstreamEnv(tg *structs.TaskGroup) map[string]string {
	env := map[string]string{}
	for _, s := range ConnectServices(tg) {
		p := s.Connect.SidecarService.Proxy
		if p == nil {
			continue
		}
		for _, u := range p.Upstreams {
			name := strings.ReplaceAll(u.DestinationName, "-", "_")
			ip := u.LocalBindAddress
			if ip == "" {
				ip = "127.0.0.1"
			}
			port := fmt.Sprint(u.LocalBindPort)
			env["NOMAD_UPSTREAM_ADDR_"+name] = ip + ":" + port
			env["NOMAD_UPSTREAM_IP_"+name] = ip
			env["NOMAD_UPSTREAM_PORT_"+name] = port
		}
	}
	return env
}
