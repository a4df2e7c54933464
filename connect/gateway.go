package connect

import (
	"strings"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

const (
	// IngressTaskPrefix prefixes an ingress gateway's injected task name.
	IngressTaskPrefix = "connect-ingress-"
	// IngressKindPrefix marks an ingress gateway task's Kind, as Nomad does.
	IngressKindPrefix = "connect-ingress:"
	// TerminatingTaskPrefix prefixes a terminating gateway's injected task
	// name.
	TerminatingTaskPrefix = "connect-terminating-"
	// TerminatingKindPrefix marks a terminating gateway task's Kind, as
	// Nomad does.
	TerminatingKindPrefix = "connect-terminating:"
	// MeshTaskPrefix prefixes a mesh gateway's injected task name.
	MeshTaskPrefix = "connect-mesh-"
	// MeshKindPrefix marks a mesh gateway task's Kind, as Nomad does.
	MeshKindPrefix = "connect-mesh:"
)

// MeshTaskName is the injected mesh gateway task's name for a service.
func MeshTaskName(service string) string { return MeshTaskPrefix + service }

// IngressTaskName is the injected ingress gateway task's name for a service.
func IngressTaskName(service string) string { return IngressTaskPrefix + service }

// TerminatingTaskName is the injected terminating gateway task's name for
// a service.
func TerminatingTaskName(service string) string { return TerminatingTaskPrefix + service }

// gatewayTask is the injected task's name and Kind of a gateway service.
func gatewayTask(s *structs.Service) (name, kind string) {
	if s.Connect.IsTerminating() {
		return TerminatingTaskName(s.Name), TerminatingKindPrefix + s.Name
	}
	if s.Connect.IsMesh() {
		return MeshTaskName(s.Name), MeshKindPrefix + s.Name
	}
	return IngressTaskName(s.Name), IngressKindPrefix + s.Name
}

// GatewayServices returns the group's services that are ingress,
// terminating or mesh gateways.
func GatewayServices(tg *structs.TaskGroup) []*structs.Service {
	var out []*structs.Service
	for _, s := range tg.Services {
		if s.Connect.IsGateway() {
			out = append(out, s)
		}
	}
	return out
}

// MeshServices returns the group's services that run a proxy: sidecars
// and gateways, in the group's order. A proxy's admin port is
// AdminBasePort plus its index here.
func MeshServices(tg *structs.TaskGroup) []*structs.Service {
	var out []*structs.Service
	for _, s := range tg.Services {
		if s != nil && (s.Connect.HasSidecar() || s.Connect.IsGateway()) {
			out = append(out, s)
		}
	}
	return out
}

// ProxyKindService returns the service of an injected proxy task's Kind
// ("connect-proxy:<svc>", "connect-ingress:<svc>",
// "connect-terminating:<svc>" or "connect-mesh:<svc>").
func ProxyKindService(kind string) (string, bool) {
	for _, p := range []string{KindPrefix, IngressKindPrefix, TerminatingKindPrefix, MeshKindPrefix} {
		if s, ok := strings.CutPrefix(kind, p); ok {
			return s, true
		}
	}
	return "", false
}

// ProxyTaskFor returns the task that runs a mesh service's proxy: its
// sidecar task, or its gateway task; nil when there is none.
func ProxyTaskFor(tg *structs.TaskGroup, s *structs.Service) *structs.Task {
	kind := KindPrefix + s.Name
	if s.Connect.IsGateway() {
		_, kind = gatewayTask(s)
	}
	for _, t := range tg.Tasks {
		if t != nil && t.Kind == kind {
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
	if s.Connect.IsGateway() {
		return id
	}
	return ProxyID(id)
}

// injectGateways adds the `connect-ingress-<service>`,
// `connect-terminating-<service>` or `connect-mesh-<service>` task of
// every gateway service of tg, as
// Nomad's job hook does: a main task
// (gateways have no lifecycle) on the connect_proxy driver, merged with
// any sidecar_task override. Its proxy gets everything from xDS.
func injectGateways(tg *structs.TaskGroup, opts Options) error {
	gws := GatewayServices(tg)
	if len(gws) == 0 {
		return nil
	}
	if err := checkGatewayNetwork(tg); err != nil {
		return err
	}
	host := gatewayHostMode(tg)
	mesh := MeshServices(tg)
	for _, s := range gws {
		passthrough := s.Connect.IsTerminating() || s.Connect.IsMesh()
		if passthrough && s.PortLabel == "" {
			// Nomad gives a terminating or mesh gateway without a port a
			// dynamic one named after its task: mesh traffic arrives there.
			s.PortLabel, _ = gatewayTask(s)
		}
		if passthrough {
			if len(tg.Networks) == 0 {
				tg.Networks = []*structs.NetworkResource{{Mode: structs.NetworkModeHost}}
			}
			ensureDynamicPort(tg.Networks[0], s.PortLabel)
		}
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
		name, kind := gatewayTask(s)
		t.Name, t.Kind, t.Lifecycle = name, kind, nil
		t.Config["proxy_id"] = EnvoyNodeID("${NOMAD_ALLOC_ID}", tg.Name, s)
		if host {
			hostGatewayTask(tg, t, s)
		}
		mergeSidecarTask(t, s.Connect.SidecarTask, opts)
		tg.Tasks = append(tg.Tasks, t)
	}
	return nil
}

// gatewayInstance is the catalog registration of a gateway service: Kind
// ingress-gateway, terminating-gateway or mesh-gateway at the
// allocation's address. Its port is the service's port, else (ingress) its
// first listener's. An ingress or terminating proxy's listeners come from
// the config entry of the same name; a mesh gateway's from the catalog,
// and it carries Consul's lan and wan tagged addresses (the advertised
// address unless the service's tagged_addresses say otherwise). Any
// gateway carries the service's tagged_addresses (taggedAddresses).
func gatewayInstance(p Placement, s *structs.Service, id string, bridge bool) (catalog.ServiceInstance, error) {
	port, err := resolvePort(p.Alloc, s.PortLabel, bridge)
	if err != nil {
		return catalog.ServiceInstance{}, err
	}
	addr, regPort := advertised(p, s.PortLabel, bridge, port)
	if !bridge && p.NodeAddress != "" {
		// A host-mode gateway listens in the node's namespace: other
		// nodes reach it at the node's advertised address (127.0.0.1 is
		// only right on a lone node).
		addr = p.NodeAddress
	}
	kind := catalog.KindIngressGateway
	var tagged map[string]catalog.TaggedAddress
	switch {
	case s.Connect.IsTerminating():
		kind = catalog.KindTerminatingGateway
	case s.Connect.IsMesh():
		kind = catalog.KindMeshGateway
		tagged = map[string]catalog.TaggedAddress{
			catalog.TaggedLAN: {Address: addr, Port: regPort},
			catalog.TaggedWAN: {Address: addr, Port: regPort},
		}
	case regPort == 0:
		if ls := s.Connect.Gateway.Ingress.Listeners; len(ls) > 0 && ls[0] != nil {
			regPort = ls[0].Port
		}
	}
	tagged, err = taggedAddresses(s.TaggedAddresses, tagged, regPort)
	if err != nil {
		return catalog.ServiceInstance{}, err
	}
	// The proxy's identity is the gateway service itself: the xDS server
	// serves it that service's leaf, and destinations authorize it by name.
	px := &catalog.Proxy{DestinationServiceName: s.Name, Config: GatewayProxyConfig(s.Connect.Gateway.Proxy)}
	return catalog.ServiceInstance{
		ID: id, Name: s.Name, Kind: kind, Address: addr, Port: regPort,
		Tags: s.Tags, Meta: s.Meta, AllocID: p.Alloc.ID, NodeID: p.NodeID, Datacenter: p.Datacenter,
		Healthy: true, Proxy: px, TaggedAddresses: tagged,
	}, nil
}
