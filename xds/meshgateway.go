package xds

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// MeshGatewayListenerName names a mesh gateway's listener as Consul does:
// "default:<addr>:<port>".
func MeshGatewayListenerName(port int) string { return TerminatingListenerName(port) }

// DatacenterClusterName is the cluster of a remote datacenter's mesh
// gateways, as Consul names it: "<dc>.internal.<trust-domain>"; every
// service of that datacenter has an SNI under it.
func DatacenterClusterName(dc, trustDomain string) string {
	return dc + ".internal." + trustDomain
}

// meshGateway builds a mesh gateway's resources (Consul's shape): a
// listener on each of its binds (GatewayBinds: the gateway's port, and
// the envoy_gateway_* options) whose filter chains are chosen by the
// SNI of the mTLS connection passing through, never terminating it. A
// local service's SNI (<svc>.default.<dc>.internal.<td>) goes by
// tcp_proxy to a cluster of its local sidecars; any SNI of a remote
// datacenter (*.<dc2>.internal.<td>) goes to a cluster of that
// datacenter's mesh gateways at their WAN addresses. Clusters are plain
// TCP (the bytes are the sidecars' TLS) with their endpoints inline, so
// the gateway is rebuilt when those instances change (touchMeshGateways).
// No chain at all (nothing to route yet): no listener.
func (b builder) meshGateway(inst catalog.ServiceInstance) (*proxyResources, error) {
	out := &proxyResources{service: inst.Name, specs: map[claKey]endpointSpec{}}
	binds, err := GatewayBinds(inst, publicBindAddr)
	if err != nil {
		return nil, err
	}
	for _, bind := range binds {
		if err := validBind(bind.Address, bind.Port); err != nil {
			return nil, fmt.Errorf("mesh gateway listener %q: %w", bind.Name, err)
		}
	}
	if err := checkBindConflicts(binds, func(b GatewayBind) []int { return []int{b.Port} }); err != nil {
		return nil, fmt.Errorf("mesh gateway listener: %w", err)
	}
	cfg := proxyConfig(inst)
	timeout, err := parseTimeoutMS(cfg, cfgConnectTimeout, defaultConnectTimeout)
	if err != nil {
		return nil, err
	}
	local, remote := b.meshGatewayTargets()
	var chains []*listener.FilterChain
	for _, svc := range sortedKeys(local) {
		sni := ClusterName(svc, b.dc, b.trustDomain)
		fc, err := sniChain(sni, "mesh_gateway_local."+svc, sni)
		if err != nil {
			return nil, err
		}
		chains = append(chains, fc)
		c := staticTCPCluster(sni, timeout, local[svc])
		r, _ := b.entries().Get(configentry.ServiceResolver, svc).(*consul.ServiceResolverConfigEntry)
		if err := gatewayResolverSettings(c, r, false); err != nil {
			return nil, err
		}
		out.clusters = append(out.clusters, c)
		subChains, err := b.meshGatewaySubsets(svc, timeout, out)
		if err != nil {
			return nil, err
		}
		chains = append(chains, subChains...)
	}
	for _, dc := range sortedKeys(remote) {
		name := DatacenterClusterName(dc, b.trustDomain)
		fc, err := sniChain("*."+name, "mesh_gateway_remote."+dc, name)
		if err != nil {
			return nil, err
		}
		chains = append(chains, fc)
		out.clusters = append(out.clusters, staticTCPCluster(name, timeout, remote[dc]))
	}
	if len(chains) == 0 {
		return out, nil
	}
	inspector, err := anyOf(&tlsinspector.TlsInspector{})
	if err != nil {
		return nil, err
	}
	for i, bind := range binds {
		if i > 0 { // each listener owns its chains
			chains = cloneChains(chains)
		}
		out.listeners = append(out.listeners, &listener.Listener{
			Name:             GatewayListenerName(bind.Name, bind.Address, bind.Port),
			Address:          socketAddress(bind.Address, bind.Port),
			TrafficDirection: core.TrafficDirection_INBOUND,
			ListenerFilters: []*listener.ListenerFilter{{
				Name: tlsInspectorFilter, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: inspector},
			}},
			FilterChains: chains,
		})
	}
	return out, nil
}

// meshGatewaySubsets are the chains and clusters of a local service's
// resolver subsets: a sidecar elsewhere that targets a subset sends the
// subset's SNI (<subset>.<svc>.default.<dc>.internal.<td>), which the
// service's own chain does not match. Each subset's cluster is a plain
// TCP EDS cluster of the service's sidecars that pass the subset's filter,
// the load assignment sidecars here use for that subset (out's specs and
// upstreams, which keep that assignment published).
func (b builder) meshGatewaySubsets(svc string, timeoutMS int, out *proxyResources) ([]*listener.FilterChain, error) {
	r, _ := b.entries().Get(configentry.ServiceResolver, svc).(*consul.ServiceResolverConfigEntry)
	if r == nil || len(r.Subsets) == 0 {
		return nil, nil
	}
	var chains []*listener.FilterChain
	for _, name := range sortedKeys(r.Subsets) {
		sub := r.Subsets[name]
		sni := subsetClusterName(name, svc, b.dc, b.trustDomain)
		fc, err := sniChain(sni, "mesh_gateway_local."+name+"."+svc, sni)
		if err != nil {
			return nil, err
		}
		chains = append(chains, fc)
		c := edsCluster(sni, timeoutMS)
		if err := gatewayResolverSettings(c, r, false); err != nil {
			return nil, err
		}
		out.clusters = append(out.clusters, c)
		k := claKey{service: svc, dc: b.dc, subset: name}
		out.specs[k] = endpointSpec{sources: []endpointSource{{service: svc, dc: b.dc, filter: sub.Filter, onlyPassing: sub.OnlyPassing}}}
		out.upstreams = append(out.upstreams, k)
	}
	return chains, nil
}

// gatewayResolverSettings applies a linked or local service's resolver
// (nil: none) to a gateway's cluster for it, as Consul does: its
// ConnectTimeout over the gateway's connect_timeout_ms, and its load
// balancer, except a hash-based one where hashes cannot be computed
// (!hashOK: a mesh gateway never sees the HTTP requests).
func gatewayResolverSettings(c *cluster.Cluster, r *consul.ServiceResolverConfigEntry, hashOK bool) error {
	if r == nil {
		return nil
	}
	if r.ConnectTimeout > 0 {
		c.ConnectTimeout = durationpb.New(r.ConnectTimeout)
	}
	if lb := r.LoadBalancer; lb != nil && (hashOK || (lb.Policy != configentry.LBRingHash && lb.Policy != configentry.LBMaglev)) {
		return applyLB(c, lb)
	}
	return nil
}

// sniChain is a filter chain matched by one server name (exact, or a
// "*." wildcard) that relays the connection's bytes to cluster untouched:
// no transport socket, so the TLS passes through.
func sniChain(serverName, statPrefix, clusterName string) (*listener.FilterChain, error) {
	tp, err := tcpProxy(statPrefix, clusterName)
	if err != nil {
		return nil, err
	}
	return &listener.FilterChain{
		Name:             serverName,
		FilterChainMatch: &listener.FilterChainMatch{ServerNames: []string{serverName}},
		Filters:          []*listener.Filter{tp},
	}, nil
}

// staticTCPCluster is a plain TCP cluster with its endpoints inline.
func staticTCPCluster(name string, timeoutMS int, eps []*endpoint.LbEndpoint) *cluster.Cluster {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	if len(eps) > 0 {
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: eps}}
	}
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		ConnectTimeout:       msDuration(timeoutMS),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
		LoadAssignment:       cla,
	}
}

// meshGatewayTargets reads the catalog's proxies: the local datacenter's
// sidecar endpoints by destination service (a linked service's: its
// terminating gateways'), and the other datacenters'
// mesh gateways (WAN addresses) by datacenter. Unhealthy or unaddressable
// instances are left out; a service or datacenter with none keeps its
// chain (connections to it fail fast rather than match nothing).
func (b builder) meshGatewayTargets() (local, remote map[string][]*endpoint.LbEndpoint) {
	local, remote = map[string][]*endpoint.LbEndpoint{}, map[string][]*endpoint.LbEndpoint{}
	if b.proxies == nil {
		return local, remote
	}
	seen := map[string]bool{}
	add := func(m map[string][]*endpoint.LbEndpoint, key string, inst catalog.ServiceInstance, addr string, port int) {
		if _, ok := m[key]; !ok {
			m[key] = nil
		}
		hp := net.JoinHostPort(addr, strconv.Itoa(port))
		if !inst.Healthy || port <= 0 || port > 65535 || net.ParseIP(addr) == nil || seen[key+"\x00"+hp] {
			return
		}
		seen[key+"\x00"+hp] = true
		m[key] = append(m[key], lbEndpoint(addr, port))
	}
	// A service linked to a terminating gateway has no sidecars: its
	// connections go to that gateway, as Consul's mesh gateways send them.
	linked := map[string][]string{} // gateway name -> linked services
	for svc, gws := range b.entries().LinkedGateways() {
		for _, gw := range gws {
			linked[gw] = append(linked[gw], svc)
		}
	}
	for _, inst := range b.proxies() {
		dc := inst.Datacenter
		if dc == "" {
			dc = b.dc
		}
		switch {
		case inst.Kind == catalog.KindConnectProxy && inst.Proxy != nil && dc == b.dc:
			add(local, inst.Proxy.DestinationServiceName, inst, inst.Address, inst.Port)
		case inst.Kind == catalog.KindTerminatingGateway && dc == b.dc:
			for _, svc := range linked[inst.Name] {
				add(local, svc, inst, inst.Address, inst.Port)
			}
		case inst.Kind == catalog.KindMeshGateway && dc != b.dc:
			addr, port := taggedAddress(inst, catalog.TaggedWAN)
			add(remote, dc, inst, addr, port)
		}
	}
	return local, remote
}

// taggedAddress is an instance's tagged address of that name, else its
// own address and port.
func taggedAddress(inst catalog.ServiceInstance, name string) (string, int) {
	if ta, ok := inst.TaggedAddresses[name]; ok && ta.Address != "" && ta.Port > 0 {
		return ta.Address, ta.Port
	}
	return inst.Address, inst.Port
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// meshGatewayInstances are the mesh gateways a sidecar dials for a target
// in targetDC: mode "local", its own datacenter's at their LAN address;
// "remote", the target datacenter's at their WAN address.
func meshGatewayInstances(c *catalog.Catalog, mode, targetDC, localDC string) []catalog.ServiceInstance {
	dc, tag := localDC, catalog.TaggedLAN
	if mode == meshGatewayRemote {
		dc, tag = targetDC, catalog.TaggedWAN
	}
	var out []catalog.ServiceInstance
	for _, inst := range c.Proxies() {
		if inst.Kind != catalog.KindMeshGateway || (inst.Datacenter != dc && (inst.Datacenter != "" || dc != localDC)) {
			continue
		}
		inst.Address, inst.Port = taggedAddress(inst, tag)
		out = append(out, inst)
	}
	return out
}

// touchMeshGateways extends a catalog change to the local mesh gateways:
// their clusters hold every local sidecar and every remote gateway, so any
// service change rebuilds them (cheap: a gateway has no discovery chain).
func (s *Server) touchMeshGateways(ch changes) {
	if len(ch.services) == 0 && len(ch.proxies) == 0 {
		return
	}
	for _, inst := range s.cfg.Catalog.Proxies() {
		if inst.Kind == catalog.KindMeshGateway && s.isLocal(inst) {
			ch.proxies[inst.ID] = struct{}{}
		}
	}
}
