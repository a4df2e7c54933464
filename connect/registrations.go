package connect

import (
	"fmt"
	"strconv"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

// Placement is what the client knows about a running allocation that the
// catalog needs.
type Placement struct {
	Alloc *structs.Allocation
	// Address is where the allocation's services are reachable: the
	// allocation's bridge address, or 127.0.0.1 in host mode (a single node
	// never advertises the host's other interfaces).
	Address string
	// NodeAddress, when set, is the node's advertised address in a
	// cluster: a bridge-mode service whose port is mapped to a host port is
	// registered at NodeAddress and that host port (as Nomad does), so
	// proxies on other nodes reach it through the node's port mapping.
	// Empty (a lone node) keeps the allocation's own address.
	NodeAddress string
	NodeID      string
	// NodeName names the node in catalog answers of other agents.
	NodeName   string
	Datacenter string
}

// Registrations returns the catalog instances of an allocation's services:
// each group service, for each sidecar_service its proxy, and each task
// service.
func Registrations(p Placement) ([]catalog.ServiceInstance, error) {
	a := p.Alloc
	if a.Job == nil {
		return nil, fmt.Errorf("%w: allocation %s has no job", ErrInvalid, a.ID)
	}
	tg := a.Job.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		return nil, fmt.Errorf("%w: allocation %s: group %q not in job", ErrInvalid, a.ID, a.TaskGroup)
	}
	bridge := BridgeMode(tg)
	var out []catalog.ServiceInstance
	for _, s := range tg.Services {
		if s.Connect.IsGateway() {
			gw, err := gatewayInstance(p, s, ServiceID(a.ID, tg.Name, s.Name, s.PortLabel), bridge)
			if err != nil {
				return nil, fmt.Errorf("%s gateway %q: %w", s.Connect.Gateway.Kinds()[0], s.Name, err)
			}
			out = append(out, gw)
			continue
		}
		port, err := resolvePort(a, s.PortLabel, bridge)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		id := ServiceID(a.ID, tg.Name, s.Name, s.PortLabel)
		addr, regPort := advertised(p, s.PortLabel, bridge, port)
		out = append(out, catalog.ServiceInstance{
			ID: id, Name: s.Name, Address: addr, Port: regPort, Tags: s.Tags, Meta: s.Meta,
			AllocID: a.ID, NodeID: p.NodeID, Datacenter: p.Datacenter, Healthy: true,
			Connect: s.Connect.HasSidecar() || (s.Connect != nil && s.Connect.Native),
		})
		if !s.Connect.HasSidecar() {
			continue
		}
		proxy, err := proxyInstance(p, s, id, port)
		if err != nil {
			return nil, fmt.Errorf("service %q sidecar: %w", s.Name, err)
		}
		out = append(out, proxy)
	}
	for _, t := range tg.Tasks {
		for _, s := range t.Services {
			port, err := resolvePort(a, s.PortLabel, bridge)
			if err != nil {
				return nil, fmt.Errorf("task %q service %q: %w", t.Name, s.Name, err)
			}
			addr, regPort := advertised(p, s.PortLabel, bridge, port)
			out = append(out, catalog.ServiceInstance{
				ID: TaskServiceID(a.ID, t.Name, s.Name, s.PortLabel), Name: s.Name, Address: addr, Port: regPort,
				Tags: s.Tags, Meta: s.Meta, AllocID: a.ID, NodeID: p.NodeID, Datacenter: p.Datacenter, Healthy: true,
			})
		}
	}
	for i := range out {
		out[i].NodeName, out[i].NodeAddress = p.NodeName, p.NodeAddress
	}
	return out, nil
}

// TaskServiceID is a task-level service's ID, as Nomad names it.
func TaskServiceID(allocID, task, service, portLabel string) string {
	return fmt.Sprintf("_nomad-task-%s-%s-%s-%s", allocID, task, service, portLabel)
}

func proxyInstance(p Placement, s *structs.Service, serviceID string, servicePort int) (catalog.ServiceInstance, error) {
	ss := s.Connect.SidecarService
	port, err := resolvePort(p.Alloc, SidecarPortLabel(s), true)
	if err != nil {
		return catalog.ServiceInstance{}, err
	}
	px := &catalog.Proxy{
		DestinationServiceName: s.Name,
		DestinationServiceID:   serviceID,
		LocalServiceAddress:    "127.0.0.1",
		LocalServicePort:       servicePort,
	}
	if cp := ss.Proxy; cp != nil {
		if cp.LocalServiceAddress != "" {
			px.LocalServiceAddress = cp.LocalServiceAddress
		}
		if cp.LocalServicePort != 0 {
			px.LocalServicePort = cp.LocalServicePort
		}
		px.Config = cp.Config
		for _, u := range cp.Upstreams {
			cu := catalog.Upstream{
				DestinationName: u.DestinationName, Datacenter: u.Datacenter,
				LocalBindAddress: orDefault(u.LocalBindAddress, "127.0.0.1"), LocalBindPort: u.LocalBindPort, Config: u.Config,
			}
			if u.MeshGateway != nil {
				cu.MeshGatewayMode = u.MeshGateway.Mode
			}
			px.Upstreams = append(px.Upstreams, cu)
		}
		if cp.Expose != nil {
			for _, e := range cp.Expose.Paths {
				lp, err := resolvePort(p.Alloc, e.ListenerPort, true)
				if err != nil {
					return catalog.ServiceInstance{}, fmt.Errorf("expose path %q: %w", e.Path, err)
				}
				px.Expose = append(px.Expose, catalog.ExposePath{Path: e.Path, Protocol: e.Protocol, LocalPathPort: e.LocalPathPort, ListenerPort: lp})
			}
		}
	}
	addr, regPort := advertised(p, SidecarPortLabel(s), true, port)
	// The sidecar's tags and meta default to its service's, as Consul's
	// sidecar registrations do: resolver subset filters (Service.Meta.x,
	// Service.Tags) select proxy instances.
	tags, meta := ss.Tags, ss.Meta
	if tags == nil {
		tags = s.Tags
	}
	if meta == nil {
		meta = s.Meta
	}
	return catalog.ServiceInstance{
		ID: ProxyID(serviceID), Name: ProxyServiceName(s.Name), Kind: catalog.KindConnectProxy,
		Address: addr, Port: regPort, Tags: tags, Meta: meta,
		AllocID: p.Alloc.ID, NodeID: p.NodeID, Datacenter: p.Datacenter, Healthy: true, Proxy: px,
	}, nil
}

// resolvePort turns a service port (a label or a number) into the port the
// service is reachable on at its registered address: inside the namespace
// for bridge mode (a bare number means the port inside), the host port
// otherwise.
func resolvePort(a *structs.Allocation, label string, inside bool) (int, error) {
	if label == "" {
		return 0, nil
	}
	if a.AllocatedResources != nil {
		for _, pm := range a.AllocatedResources.Shared.Ports {
			if pm.Label != label {
				continue
			}
			if inside && pm.To > 0 {
				return pm.To, nil
			}
			return pm.Value, nil
		}
	}
	if n, err := strconv.Atoi(label); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("%w: port %q is neither a port label of the group nor a number", ErrInvalid, label)
}

// advertised is where a service is registered: on a node with an
// advertised address, a bridge-mode port mapped to a host port is reached
// at the node's address and the host port; otherwise at the allocation's
// address and port.
func advertised(p Placement, label string, bridge bool, port int) (string, int) {
	if p.NodeAddress == "" || !bridge || p.Alloc.AllocatedResources == nil {
		return p.Address, port
	}
	for _, pm := range p.Alloc.AllocatedResources.Shared.Ports {
		if pm.Label == label && pm.Value > 0 {
			return p.NodeAddress, pm.Value
		}
	}
	return p.Address, port
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ServicePort is the port a service (or check) label resolves to on an
// allocation: inside the namespace in bridge mode, the host port otherwise.
func ServicePort(a *structs.Allocation, label string, bridge bool) (int, error) {
	return resolvePort(a, label, bridge)
}

// BridgeMode reports whether the group runs in its own network namespace.
func BridgeMode(tg *structs.TaskGroup) bool {
	return len(tg.Networks) == 1 && tg.Networks[0].Mode != structs.NetworkModeHost && tg.Networks[0].Mode != ""
}

// ProxyIdentities returns who the proxies of an allocation's group are:
// each sidecar and gateway as Registrations registers it (ID, Name, Kind,
// AllocID, Proxy.DestinationServiceName), without its placement. The
// allocation's control plane socket accepts them while they are not in
// the catalog (after an agent restart, during shutdown_delay).
func ProxyIdentities(a *structs.Allocation) []catalog.ServiceInstance {
	if a == nil || a.Job == nil {
		return nil
	}
	tg := a.Job.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		return nil
	}
	var out []catalog.ServiceInstance
	for _, s := range MeshServices(tg) {
		inst := catalog.ServiceInstance{ID: EnvoyNodeID(a.ID, tg.Name, s), Name: ProxyServiceName(s.Name),
			Kind: catalog.KindConnectProxy, AllocID: a.ID, Proxy: &catalog.Proxy{DestinationServiceName: s.Name}}
		switch {
		case s.Connect.IsIngress():
			inst.Name, inst.Kind = s.Name, catalog.KindIngressGateway
		case s.Connect.IsTerminating():
			inst.Name, inst.Kind = s.Name, catalog.KindTerminatingGateway
		case s.Connect.IsMesh():
			inst.Name, inst.Kind = s.Name, catalog.KindMeshGateway
		}
		out = append(out, inst)
	}
	return out
}
