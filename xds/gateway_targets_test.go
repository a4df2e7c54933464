package xds

import (
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// envoyMatch picks a filter chain by server name as Envoy does: the exact
// name, then "*." suffix wildcards from the longest, then a chain without
// names; nil when none matches (Envoy closes the connection).
func envoyMatch(l *listener.Listener, sni string) *listener.FilterChain {
	byName := map[string]*listener.FilterChain{}
	var dflt *listener.FilterChain
	for _, fc := range l.GetFilterChains() {
		if len(fc.GetFilterChainMatch().GetServerNames()) == 0 {
			dflt = fc
		}
		for _, n := range fc.GetFilterChainMatch().GetServerNames() {
			byName[n] = fc
		}
	}
	if fc := byName[sni]; fc != nil {
		return fc
	}
	for s := sni; strings.Contains(s, "."); {
		s = s[strings.Index(s, ".")+1:]
		if fc := byName["*."+s]; fc != nil {
			return fc
		}
	}
	return dflt
}

// chainCluster is the cluster a passthrough chain's tcp_proxy sends to.
func chainCluster(t *testing.T, fc *listener.FilterChain) string {
	t.Helper()
	if fc == nil || len(fc.GetFilters()) == 0 {
		return ""
	}
	return unpack(t, fc.GetFilters()[0].GetTypedConfig(), &tcpproxy.TcpProxy{}).GetCluster()
}

// A sidecar elsewhere that targets a subset of a local service sends the
// subset's SNI: the mesh gateway routes it to an EDS cluster of the
// sidecars in that subset (the service's own chain does not match it).
func TestMeshGatewayResolverSubsets(t *testing.T) {
	insts := meshGatewayCatalog()
	set := configentry.NewSet().With(&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api",
		DefaultSubset: "v1", Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1", OnlyPassing: true}}})
	b := builder{dc: "dc1", trustDomain: testTD, set: set, proxies: func() []catalog.ServiceInstance { return insts }}
	res, err := b.proxy(insts[4])
	if err != nil {
		t.Fatal(err)
	}
	sni := subsetClusterName("v1", "api", "dc1", testTD)
	if got := chainCluster(t, envoyMatch(res.listeners[0], sni)); got != sni {
		t.Fatalf("subset SNI %q goes to cluster %q, want its own", sni, got)
	}
	k := claKey{service: "api", dc: "dc1", subset: "v1"}
	spec, ok := res.specs[k]
	if !ok || spec.sources[0].filter != "Service.Meta.version == v1" || !spec.sources[0].onlyPassing {
		t.Errorf("subset load assignment spec = %+v, %v", spec, ok)
	}
	if len(res.upstreams) != 1 || res.upstreams[0] != k {
		t.Errorf("upstreams = %v, want the subset's load assignment (kept published)", res.upstreams)
	}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
	}
	if err := envoyvalidate.All(res.listeners[0]); err != nil {
		t.Errorf("listener: %v", err)
	}
}

// A service linked to a terminating gateway (no sidecars) is reached
// through that gateway, as Consul's mesh gateways route it.
func TestMeshGatewayLinkedService(t *testing.T) {
	tgw := catalog.ServiceInstance{ID: "tgw-1", Name: "tgw", Kind: catalog.KindTerminatingGateway,
		Address: "10.0.0.7", Port: 9443, Datacenter: "dc1", Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "tgw"}}
	insts := append(meshGatewayCatalog(), tgw)
	set := configentry.NewSet().With(&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw",
		Services: []consul.LinkedService{{Name: "db"}}})
	b := builder{dc: "dc1", trustDomain: testTD, set: set, proxies: func() []catalog.ServiceInstance { return insts }}
	res, err := b.proxy(insts[4])
	if err != nil {
		t.Fatal(err)
	}
	sni := ClusterName("db", "dc1", testTD)
	if got := chainCluster(t, envoyMatch(res.listeners[0], sni)); got != sni {
		t.Fatalf("linked service SNI %q goes to cluster %q", sni, got)
	}
	for _, c := range res.clusters {
		if c.GetName() != sni {
			continue
		}
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 ||
			eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "10.0.0.7" {
			t.Errorf("linked service's endpoints = %v, want the terminating gateway", eps)
		}
		return
	}
	t.Fatalf("no cluster %s", sni)
}

// A terminating gateway routes a linked service's resolver subsets: the
// subset's SNI to a chain terminating with the service's leaf and a
// cluster of the service's external instances in the subset.
func TestTerminatingGatewaySubsets(t *testing.T) {
	insts := []catalog.ServiceInstance{
		{ID: "db-1", Name: "db", Address: "192.0.2.10", Port: 5432, Healthy: true, Meta: map[string]string{"version": "v1"}},
		{ID: "db-2", Name: "db", Address: "192.0.2.11", Port: 5432, Healthy: true, Meta: map[string]string{"version": "v2"}},
	}
	set := configentry.NewSet().With(&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw",
		Services: []consul.LinkedService{{Name: "db"}}}).With(&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db",
		Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}})
	gw := catalog.ServiceInstance{ID: "tgw-1", Name: "tgw", Kind: catalog.KindTerminatingGateway, Address: "10.0.0.7", Port: 9443,
		Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "tgw"}}
	b := builder{dc: "dc1", trustDomain: testTD, set: set,
		instances: func(svc string) []catalog.ServiceInstance { return insts }}
	res, err := b.proxy(gw)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(res.listeners[0]); err != nil {
		t.Errorf("listener: %v", err)
	}
	for sni, want := range map[string][]string{
		ClusterName("db", "dc1", testTD):             {"192.0.2.10", "192.0.2.11"},
		subsetClusterName("v1", "db", "dc1", testTD): {"192.0.2.10"},
	} {
		if fc := envoyMatch(res.listeners[0], sni); fc == nil || fc.GetName() != sni {
			t.Errorf("SNI %q: chain %v", sni, fc.GetName())
		}
		var got []string
		for _, c := range res.clusters {
			if c.GetName() == sni {
				for _, e := range c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints() {
					got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("cluster %s endpoints = %v, want %v", sni, got, want)
		}
	}
}

// A subset's filter is about the service's own instances: a target reached
// through mesh gateways, or a service linked to a terminating gateway,
// keeps those gateways as endpoints (they route the subset's SNI).
func TestSubsetFilterSkipsGateways(t *testing.T) {
	gw := catalog.ServiceInstance{ID: "g1", Name: "gw", Address: "10.0.0.9", Port: 8443, Healthy: true}
	src := instanceSource{
		sidecars: func(service, dc string) []catalog.ServiceInstance { return []catalog.ServiceInstance{gw} },
		get:      func(string) (catalog.ServiceInstance, bool) { return catalog.ServiceInstance{}, false },
		gateways: func(mode, dc string) []catalog.ServiceInstance { return []catalog.ServiceInstance{gw} },
		linked:   func(service string) bool { return service == "db" },
	}
	for name, s := range map[string]endpointSource{
		"linked service":     {service: "db", dc: "dc1", filter: "Service.Meta.version == v1"},
		"through mesh gates": {service: "api", dc: "dc2", filter: "Service.Meta.version == v1", gateway: "local"},
	} {
		eps, err := sourceEndpoints(s, src, metaFilter)
		if err != nil || len(eps) != 1 {
			t.Errorf("%s: endpoints %v, %v; want the gateway", name, eps, err)
		}
	}
	if eps, _ := sourceEndpoints(endpointSource{service: "api", dc: "dc1", filter: "Service.Meta.version == v1"}, src, metaFilter); len(eps) != 0 {
		t.Errorf("a service's own instance outside the subset kept: %v", eps)
	}
}
