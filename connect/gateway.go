package connect

import (
	"strings"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

const (
	// IngressTaskPrefix prefixes an ingress gateway's injected task name.
	IngressTaskPrefix = "connect-ingress-"
	// IngressKindPrefix marks an ingress gateway task's Kind, as Nomad does.
	IngressKindPrefix = "connect-ingress:"
)

// IngressTaskName is the injected ingress gateway task's name for a service.
func IngressTaskName(service string) string { return IngressTaskPrefix + service }

// GatewayServices returns the group's services that are ingress gateways.
func GatewayServices(tg *structs.TaskGroup) []*structs.Service {
	var out []*structs.Service
	for _, s := range tg.Services {
		if s.Connect.IsIngress() {
			out = append(out, s)
		}
	}
	return out
}

// MeshServices returns the group's services that run a proxy: sidecars
// and ingress gateways, in the group's order. A proxy's admin port is
// AdminBasePort plus its index here.
func MeshServices(tg *structs.TaskGroup) []*structs.Service {
	var out []*structs.Service
	for _, s := range tg.Services {
		if s.Connect.HasSidecar() || s.Connect.IsIngress() {
			out = append(out, s)
		}
	}
	return out
}

// ProxyKindService returns the service of an injected proxy task's Kind
// ("connect-proxy:<svc>" or "connect-ingress:<svc>").
func ProxyKindService(kind string) (string, bool) {
	for _, p := range []string{KindPrefix, IngressKindPrefix} {
		if s, ok := strings.CutPrefix(kind, p); ok {
			return s, true
		}
	}
	return "", false
}

// ProxyTaskFor returns the task that runs a mesh service's proxy: its
// sidecar task, or its ingress gateway task; nil when there is none.
func ProxyTaskFor(tg *structs.TaskGroup, s *structs.Service) *structs.Task {
	kind := KindPrefix + s.Name
	if s.Connect.IsIngress() {
		kind = IngressKindPrefix + s.Name
	}
	for _, t := range tg.Tasks {
		if t.Kind == kind {
			return t
		}
	}
	return nil
}

// EnvoyNodeID is the proxy ID (Envoy node ID) of a mesh service's proxy:
// the sidecar's service ID, or for a gateway the gateway service's own ID
// (Consul registers a gateway as the proxy itself).
func EnvoyNodeID(allocID, group string, s *structs.Service) string {
	id := ServiceID(allocID, group, s.Name, s.PortLabel)
	if s.Connect.IsIngress() {
		return id
	}
	return ProxyID(id)
}

// injectGateways adds the `connect-ingress-<service>` task of every
// ingress gateway service of tg, as Nomad's job hook does: a main task
// (gateways have no lifecycle) on the connect_proxy driver, merged with
// any sidecar_task override. Its proxy gets everything from xDS.
func injectGateways(tg *structs.TaskGroup, opts Options) error {
	gws := GatewayServices(tg)
	if len(gws) == 0 {
		return nil
	}
	if err := checkNetwork(tg); err != nil {
		return err
	}
	mesh := MeshServices(tg)
	for _, s := range gws {
		if ProxyTaskFor(tg, s) != nil {
			continue
		}
		index := 0
		for i, m := range mesh {
			if m == s {
				index = i
			}
		}
		t := proxyTask(tg.Name, s, index)
		t.Name, t.Kind, t.Lifecycle = IngressTaskName(s.Name), IngressKindPrefix+s.Name, nil
		t.Config["proxy_id"] = EnvoyNodeID("${NOMAD_ALLOC_ID}", tg.Name, s)
		mergeSidecarTask(t, s.Connect.SidecarTask, opts)
		tg.Tasks = append(tg.Tasks, t)
	}
	return nil
}

// gatewayInstance is the catalog registration of an ingress gateway
// service: Kind ingress-gateway at the allocation's address. Its port is
// the service's port, else its first listener's. The proxy's listeners
// come from the ingress-gateway config entry of the same name.
func gatewayInstance(p Placement, s *structs.Service, id string, bridge bool) (catalog.ServiceInstance, error) {
	port, err := resolvePort(p.Alloc, s.PortLabel, bridge)
	if err != nil {
		return catalog.ServiceInstance{}, err
	}
	addr, regPort := advertised(p, s.PortLabel, bridge, port)
	if regPort == 0 {
		if ls := s.Connect.Gateway.Ingress.Listeners; len(ls) > 0 && ls[0] != nil {
			regPort = ls[0].Port
		}
	}
	// The proxy's identity is the gateway service itself: the xDS server
	// serves it that service's leaf, and destinations authorize it by name.
	px := &catalog.Proxy{DestinationServiceName: s.Name}
	if gp := s.Connect.Gateway.Proxy; gp != nil && gp.ConnectTimeout != nil {
		px.Config = map[string]any{"connect_timeout_ms": int(*gp.ConnectTimeout / time.Millisecond)}
	}
	return catalog.ServiceInstance{
		ID: id, Name: s.Name, Kind: catalog.KindIngressGateway, Address: addr, Port: regPort,
		Tags: s.Tags, Meta: s.Meta, AllocID: p.Alloc.ID, NodeID: p.NodeID, Datacenter: p.Datacenter,
		Healthy: true, Proxy: px,
	}, nil
}
