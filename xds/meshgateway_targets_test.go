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
