package xds

import (
	"errors"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func testMeshGateway(id, dc, addr string, port int, wan *catalog.TaggedAddress) catalog.ServiceInstance {
	inst := catalog.ServiceInstance{ID: id, Name: "mesh-gateway", Kind: catalog.KindMeshGateway, Address: addr, Port: port,
		Datacenter: dc, Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "mesh-gateway"}}
	if wan != nil {
		inst.TaggedAddresses = map[string]catalog.TaggedAddress{catalog.TaggedLAN: {Address: addr, Port: port}, catalog.TaggedWAN: *wan}
	}
	return inst
}

func inDC(inst catalog.ServiceInstance, dc, addr string) catalog.ServiceInstance {
	inst.Datacenter, inst.Address = dc, addr
	return inst
}

// meshGatewayCatalog: web and api sidecars in dc1 (one api down), an api
// sidecar in dc2, gateways in dc1 (the one built), dc2 (WAN tagged) and
// dc3 (no tagged address: its own address).
func meshGatewayCatalog() []catalog.ServiceInstance {
	down := inDC(testProxy("api-2", "api", 21001, nil), "dc1", "10.0.0.3")
	down.Healthy = false
	return []catalog.ServiceInstance{
		inDC(testProxy("web-1", "web", 21000, nil), "dc1", "10.0.0.1"),
		inDC(testProxy("api-1", "api", 21000, nil), "dc1", "10.0.0.2"),
		down,
		inDC(testProxy("api-9", "api", 21000, nil), "dc2", "10.0.9.2"),
		testMeshGateway("mgw-1", "dc1", "10.0.0.5", 24000, nil),
		testMeshGateway("mgw-2", "dc2", "10.0.9.5", 24000, &catalog.TaggedAddress{Address: "192.0.2.9", Port: 8443}),
		testMeshGateway("mgw-3", "dc3", "10.0.8.5", 24001, nil),
	}
}

func TestMeshGatewayResources(t *testing.T) {
	insts := meshGatewayCatalog()
	b := builder{dc: "dc1", trustDomain: testTD, proxies: func() []catalog.ServiceInstance { return insts }}
	res, err := b.proxy(insts[4])
	if err != nil {
		t.Fatal(err)
	}
	if res.service != "mesh-gateway" || len(res.upstreams) != 0 {
		t.Errorf("identity %q, upstreams %v", res.service, res.upstreams)
	}
	if len(res.listeners) != 1 || res.listeners[0].GetName() != "default:0.0.0.0:24000" {
		t.Fatalf("listeners = %v", res.listeners)
	}
	l := res.listeners[0]
	if err := envoyvalidate.All(l); err != nil {
		t.Errorf("listener: %v", err)
	}
	if len(l.GetListenerFilters()) != 1 || l.GetListenerFilters()[0].GetName() != tlsInspectorFilter {
		t.Errorf("listener filters = %v", l.GetListenerFilters())
	}
	want := []struct{ sni, cluster string }{
		{ClusterName("api", "dc1", testTD), ClusterName("api", "dc1", testTD)},
		{ClusterName("web", "dc1", testTD), ClusterName("web", "dc1", testTD)},
		{"*.dc2.internal." + testTD, "dc2.internal." + testTD},
		{"*.dc3.internal." + testTD, "dc3.internal." + testTD},
	}
	if len(l.GetFilterChains()) != len(want) {
		t.Fatalf("filter chains = %v", l.GetFilterChains())
	}
	for i, w := range want {
		fc := l.GetFilterChains()[i]
		if got := fc.GetFilterChainMatch().GetServerNames(); !reflect.DeepEqual(got, []string{w.sni}) {
			t.Errorf("chain %d matches %v, want %s", i, got, w.sni)
		}
		if fc.GetTransportSocket() != nil {
			t.Errorf("chain %d terminates TLS: %v", i, fc.GetTransportSocket())
		}
		if fs := fc.GetFilters(); len(fs) != 1 {
			t.Fatalf("chain %d filters = %v (want tcp_proxy alone: no ext_authz at a gateway)", i, fs)
		}
		if tp := unpack(t, fc.GetFilters()[0].GetTypedConfig(), &tcpproxy.TcpProxy{}); tp.GetCluster() != w.cluster {
			t.Errorf("chain %d proxies to %q, want %q", i, tp.GetCluster(), w.cluster)
		}
	}
	eps := map[string][]string{}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		if c.GetType() != cluster.Cluster_STATIC || c.GetTransportSocket() != nil {
			t.Errorf("cluster %s: type %v, transport socket %v (want plain STATIC)", c.GetName(), c.GetType(), c.GetTransportSocket())
		}
		eps[c.GetName()] = claHostPorts(c.GetLoadAssignment())
	}
	wantEps := map[string][]string{
		ClusterName("api", "dc1", testTD): {"10.0.0.2:21000"},
		ClusterName("web", "dc1", testTD): {"10.0.0.1:21000"},
		"dc2.internal." + testTD:          {"192.0.2.9:8443"},
		"dc3.internal." + testTD:          {"10.0.8.5:24001"},
	}
	if !reflect.DeepEqual(eps, wantEps) {
		t.Errorf("cluster endpoints = %v, want %v", eps, wantEps)
	}
}

// A mesh gateway with nothing to route has no listener yet (Envoy refuses
// a listener without filter chains); a bad port is a clear error.
func TestMeshGatewayEmptyAndInvalid(t *testing.T) {
	gw := testMeshGateway("mgw-1", "dc1", "10.0.0.5", 24000, nil)
	res, err := builder{dc: "dc1", trustDomain: testTD}.proxy(gw)
	if err != nil || len(res.listeners) != 0 || len(res.clusters) != 0 {
		t.Fatalf("empty gateway = %+v, %v", res, err)
	}
	gw.Port = 0
	if _, err := (builder{dc: "dc1", trustDomain: testTD}).proxy(gw); err == nil {
		t.Fatal("a mesh gateway without a port built")
	}
}

func claHostPorts(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	slices.Sort(out)
	return out
}

func findCluster(t *testing.T, res *proxyResources, name string) *cluster.Cluster {
	t.Helper()
	for _, c := range res.clusters {
		if c.GetName() == name {
			return c
		}
	}
	t.Fatalf("no cluster %s in %v", name, res.clusters)
	return nil
}

// An upstream in dc2 keeps its cluster (named by the SNI the gateways
// route by, verifying dc2's identity) in every mode; local and remote
// read their endpoints from a load assignment of the gateways.
func TestUpstreamMeshGatewayCluster(t *testing.T) {
	sni := ClusterName("api", "dc2", testTD)
	for _, tc := range []struct {
		mode, upDC, wantEDS string
		gateway             string
	}{
		{"", "dc2", "", ""},
		{"none", "dc2", "", ""},
		{"local", "dc2", sni + "~mesh-gateway-local", "local"},
		{"remote", "dc2", sni + "~mesh-gateway-remote", "remote"},
		{"local", "", "", ""}, // the local datacenter never goes through gateways
	} {
		t.Run(tc.mode+"/"+tc.upDC, func(t *testing.T) {
			up := catalog.Upstream{DestinationName: "api", Datacenter: tc.upDC, LocalBindPort: 9191, MeshGatewayMode: tc.mode}
			b := builder{dc: "dc1", trustDomain: testTD}
			res, err := b.proxy(testProxy("web-1", "web", 21000, nil, up))
			if err != nil {
				t.Fatal(err)
			}
			name := sni
			if tc.upDC == "" {
				name = ClusterName("api", "dc1", testTD)
			}
			c := findCluster(t, res, name)
			if err := envoyvalidate.All(c); err != nil {
				t.Error(err)
			}
			if got := c.GetEdsClusterConfig().GetServiceName(); got != tc.wantEDS {
				t.Errorf("eds service_name = %q, want %q", got, tc.wantEDS)
			}
			utls := unpack(t, c.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
			if utls.GetSni() != name {
				t.Errorf("SNI = %q, want %q", utls.GetSni(), name)
			}
			if len(res.upstreams) != 1 || res.upstreams[0].gateway != tc.gateway {
				t.Errorf("load assignments = %+v", res.upstreams)
			}
			k := res.upstreams[0]
			if spec := res.specs[k]; len(spec.sources) != 1 || spec.sources[0].gateway != tc.gateway || spec.plain() == (tc.gateway != "") {
				t.Errorf("spec = %+v", spec)
			}
			if tc.wantEDS != "" && k.clusterName(testTD) != tc.wantEDS {
				t.Errorf("load assignment named %q, want %q", k.clusterName(testTD), tc.wantEDS)
			}
		})
	}
}

// The upstream's override mode comes from the upstream, else the caller's
// service-defaults (upstream override, upstream defaults, its own
// MeshGateway), else proxy-defaults; the destination's service-defaults
// only set its own target's mode (targetMeshGatewayMode).
func TestMeshGatewayModePrecedence(t *testing.T) {
	pd := &consul.ProxyConfigEntry{Kind: consul.ProxyDefaults, Name: configentry.GlobalName, MeshGateway: consul.MeshGatewayConfig{Mode: "remote"}}
	webSD := func(own, def, over string) *consul.ServiceConfigEntry {
		sd := &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(own)}}
		sd.UpstreamConfig = &consul.UpstreamConfiguration{
			Defaults:  &consul.UpstreamConfig{MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(def)}},
			Overrides: []*consul.UpstreamConfig{{Name: "api", MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(over)}}},
		}
		return sd
	}
	apiSD := &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "api", MeshGateway: consul.MeshGatewayConfig{Mode: "none"}}
	tests := []struct {
		name     string
		upstream string
		entries  []configentry.Entry
		want     string
	}{
		{"nothing", "", nil, ""},
		{"proxy-defaults", "", []configentry.Entry{pd}, "remote"},
		{"upstream beats proxy-defaults", "local", []configentry.Entry{pd}, "local"},
		{"upstream none beats proxy-defaults", "none", []configentry.Entry{pd}, "none"},
		{"proxy-defaults beat the destination's defaults (those are its target's own)", "", []configentry.Entry{pd, apiSD}, "remote"},
		{"the destination's defaults are no override", "", []configentry.Entry{apiSD}, ""},
		{"caller's defaults beat the destination's", "", []configentry.Entry{pd, apiSD, webSD("local", "", "")}, "local"},
		{"upstream defaults beat the caller's own", "", []configentry.Entry{pd, webSD("local", "remote", "")}, "remote"},
		{"override beats upstream defaults", "", []configentry.Entry{pd, webSD("local", "remote", "none")}, "none"},
		{"upstream beats everything", "local", []configentry.Entry{pd, apiSD, webSD("remote", "remote", "remote")}, "local"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(tc.entries...)}
			got := b.meshGatewayMode("web", catalog.Upstream{DestinationName: "api", Datacenter: "dc2", MeshGatewayMode: tc.upstream})
			if got != tc.want {
				t.Errorf("mode = %q, want %q", got, tc.want)
			}
		})
	}
}

// Through a real catalog: mode local dials dc1's gateways at their LAN
// address, remote dc2's at their WAN address; the load assignment lists
// them (not the dc2 sidecars).
func TestMeshGatewayEndpoints(t *testing.T) {
	cat := catalog.New()
	for _, inst := range meshGatewayCatalog() {
		cat.Register(inst)
	}
	cat.Register(testMeshGateway("mgw-1b", "dc1", "10.0.0.6", 24000, &catalog.TaggedAddress{Address: "192.0.2.1", Port: 443}))
	s := &Server{cfg: Config{Catalog: cat}, b: builder{dc: "dc1", trustDomain: testTD}}
	src := s.instanceSource(false)
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"local", []string{"10.0.0.5:24000", "10.0.0.6:24000"}},
		{"remote", []string{"192.0.2.9:8443"}},
	} {
		spec := endpointSpec{sources: []endpointSource{{service: "api", dc: "dc2", gateway: tc.mode}}}
		k := claKey{service: "api", dc: "dc2", gateway: tc.mode}
		cla, err := targetAssignment(k.clusterName(testTD), spec, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := envoyvalidate.All(cla); err != nil {
			t.Error(err)
		}
		got := claHostPorts(cla)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: endpoints %v, want %v", tc.mode, got, tc.want)
		}
		if !spec.uses("anything") {
			t.Errorf("%s: a gateway spec must be recomputed on any service change", tc.mode)
		}
	}
}

// Two upstreams of one sidecar to the same target share its cluster, so
// they must agree on the mode: otherwise the proxy is refused, naming it.
func TestUpstreamMeshGatewayModesDisagree(t *testing.T) {
	ups := []catalog.Upstream{
		{DestinationName: "api", Datacenter: "dc2", LocalBindPort: 9191, MeshGatewayMode: "local"},
		{DestinationName: "api", Datacenter: "dc2", LocalBindPort: 9192},
	}
	_, err := builder{dc: "dc1", trustDomain: testTD}.proxy(testProxy("web-1", "web", 21000, nil, ups...))
	if !errors.Is(err, ErrInvalidProxyConfig) || !strings.Contains(err.Error(), ClusterName("api", "dc2", testTD)) {
		t.Fatalf("error = %v, want ErrInvalidProxyConfig naming api's dc2 cluster", err)
	}
	ups[1].MeshGatewayMode = "local"
	if _, err := (builder{dc: "dc1", trustDomain: testTD}).proxy(testProxy("web-1", "web", 21000, nil, ups...)); err != nil {
		t.Fatalf("two upstreams agreeing on the mode: %v", err)
	}
}
