package xds

import (
	"reflect"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func sdMode(service, mode string) *consul.ServiceConfigEntry {
	return &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: service, MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(mode)}}
}

// A target's mode: the upstream's override, else its own service's
// service-defaults, else proxy-defaults.
func TestTargetMeshGatewayMode(t *testing.T) {
	pd := &consul.ProxyConfigEntry{Kind: consul.ProxyDefaults, Name: configentry.GlobalName, MeshGateway: consul.MeshGatewayConfig{Mode: "local"}}
	target := &configentry.Target{ID: "billing.default.default.dc2", Service: "billing", Datacenter: "dc2"}
	for _, tc := range []struct {
		name, override string
		entries        []configentry.Entry
		want           string
	}{
		{"nothing", "", nil, ""},
		{"proxy-defaults", "", []configentry.Entry{pd}, "local"},
		{"own service-defaults beat proxy-defaults", "", []configentry.Entry{pd, sdMode("billing", "remote")}, "remote"},
		{"another service's defaults do not count", "", []configentry.Entry{sdMode("api", "remote")}, ""},
		{"override beats everything", "none", []configentry.Entry{pd, sdMode("billing", "remote")}, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(tc.entries...)}
			if got := b.targetMeshGatewayMode(tc.override, target); got != tc.want {
				t.Errorf("mode = %q, want %q", got, tc.want)
			}
		})
	}
}

// modeCatalog: meshGatewayCatalog with billing sidecars in dc2 and dc3.
func modeCatalog() *catalog.Catalog {
	cat := catalog.New()
	for _, inst := range meshGatewayCatalog() {
		cat.Register(inst)
	}
	cat.Register(inDC(testProxy("billing-2", "billing", 21000, nil), "dc2", "10.0.9.7"))
	cat.Register(inDC(testProxy("billing-3", "billing", 21000, nil), "dc3", "10.0.8.7"))
	return cat
}

// modeEndpoints builds web's upstream api (in dc2) against entries and
// returns the cluster named sni, its load assignment's name and its
// endpoints by priority (each with its transport socket match SNI).
func modeEndpoints(t *testing.T, sni string, up catalog.Upstream, entries ...configentry.Entry) (string, map[uint32][]string) {
	t.Helper()
	b := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(entries...)}
	res, err := b.proxy(testProxy("web-1", "web", 21000, nil, up))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	c := findCluster(t, res, sni)
	if len(res.upstreams) != 1 {
		t.Fatalf("load assignments = %v", res.upstreams)
	}
	k := res.upstreams[0]
	if eds := c.GetEdsClusterConfig().GetServiceName(); eds != "" && eds != k.clusterName(testTD) {
		t.Errorf("cluster reads %q, the load assignment is %q", eds, k.clusterName(testTD))
	}
	s := &Server{cfg: Config{Catalog: modeCatalog()}, b: b}
	cla, err := targetAssignment(k.clusterName(testTD), res.specs[k], s.instanceSource(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(cla); err != nil {
		t.Error(err)
	}
	got := map[uint32][]string{}
	for _, l := range cla.GetEndpoints() {
		hp := claHostPorts(&endpoint.ClusterLoadAssignment{Endpoints: []*endpoint.LocalityLbEndpoints{l}})
		if m := l.GetLbEndpoints()[0].GetMetadata().GetFilterMetadata()[transportSocketMatchKey]; m != nil {
			hp = append(hp, "sni="+m.GetFields()["sni"].GetStringValue())
		}
		got[l.GetPriority()] = append(got[l.GetPriority()], hp...)
	}
	return c.GetEdsClusterConfig().GetServiceName(), got
}

// A resolver redirect to another service: the target takes the mode of
// billing's service-defaults, not api's (the destination of the
// upstream), unless the upstream's own config (or proxy-defaults) sets
// one, which overrides every target as in Consul.
func TestRedirectTargetMeshGatewayMode(t *testing.T) {
	sni := ClusterName("billing", "dc2", testTD)
	redirect := &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api", Redirect: &consul.ServiceResolverRedirect{Service: "billing"}}
	pdLocal := &consul.ProxyConfigEntry{Kind: consul.ProxyDefaults, Name: configentry.GlobalName, MeshGateway: consul.MeshGatewayConfig{Mode: "local"}}
	up := catalog.Upstream{DestinationName: "api", Datacenter: "dc2", LocalBindPort: 9191}
	for _, tc := range []struct {
		name    string
		upMode  string
		entries []configentry.Entry
		wantEDS string
		want    map[uint32][]string
	}{
		{"billing remote, api local: dc2's gateways", "", []configentry.Entry{redirect, sdMode("api", "local"), sdMode("billing", "remote")},
			meshGatewayCLAName(sni, "remote"), map[uint32][]string{0: {"192.0.2.9:8443"}}},
		{"billing none, api local: billing's sidecars", "", []configentry.Entry{redirect, sdMode("api", "local"), sdMode("billing", "none")},
			"", map[uint32][]string{0: {"10.0.9.7:21000"}}},
		{"billing unset, api remote: billing's sidecars", "", []configentry.Entry{redirect, sdMode("api", "remote")},
			"", map[uint32][]string{0: {"10.0.9.7:21000"}}},
		{"upstream local overrides billing remote", "local", []configentry.Entry{redirect, sdMode("billing", "remote")},
			meshGatewayCLAName(sni, "local"), map[uint32][]string{0: {"10.0.0.5:24000"}}},
		{"proxy-defaults local overrides billing remote", "", []configentry.Entry{redirect, pdLocal, sdMode("billing", "remote")},
			meshGatewayCLAName(sni, "local"), map[uint32][]string{0: {"10.0.0.5:24000"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.MeshGatewayMode = tc.upMode
			eds, got := modeEndpoints(t, sni, up, tc.entries...)
			if eds != tc.wantEDS {
				t.Errorf("eds service_name = %q, want %q", eds, tc.wantEDS)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("endpoints by priority = %v, want %v", got, tc.want)
			}
		})
	}
}

// Failover to another service in another datacenter: each target is
// reached by its own service's mode (api through dc2's gateways, billing
// in dc3 through dc1's or directly), in a load assignment named for that
// mix, so that the same target under one mode for all stays apart.
func TestFailoverTargetMeshGatewayMode(t *testing.T) {
	sni := ClusterName("api", "dc2", testTD)
	backup := ClusterName("billing", "dc3", testTD)
	failover := &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api", Failover: map[string]consul.ServiceResolverFailover{
		"*": {Targets: []consul.ServiceResolverFailoverTarget{{Service: "billing", Datacenter: "dc3"}}},
	}}
	up := catalog.Upstream{DestinationName: "api", Datacenter: "dc2", LocalBindPort: 9191}
	for _, tc := range []struct {
		name    string
		upMode  string
		entries []configentry.Entry
		wantEDS string
		want    map[uint32][]string
	}{
		{"billing local", "", []configentry.Entry{failover, sdMode("api", "remote"), sdMode("billing", "local")},
			meshGatewayCLAName(sni, "remote+local"), map[uint32][]string{0: {"192.0.2.9:8443"}, 1: {"10.0.0.5:24000", "sni=" + backup}}},
		{"billing none", "", []configentry.Entry{failover, sdMode("api", "remote"), sdMode("billing", "none")},
			meshGatewayCLAName(sni, "remote+none"), map[uint32][]string{0: {"192.0.2.9:8443"}, 1: {"10.0.8.7:21000"}}},
		{"api unset, billing remote", "", []configentry.Entry{failover, sdMode("billing", "remote")},
			meshGatewayCLAName(sni, "none+remote"), map[uint32][]string{0: {"10.0.9.2:21000"}, 1: {"10.0.8.5:24001", "sni=" + backup}}},
		{"upstream remote for both", "remote", []configentry.Entry{failover, sdMode("api", "none"), sdMode("billing", "local")},
			meshGatewayCLAName(sni, "remote"), map[uint32][]string{0: {"192.0.2.9:8443"}, 1: {"10.0.8.5:24001", "sni=" + backup}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.MeshGatewayMode = tc.upMode
			eds, got := modeEndpoints(t, sni, up, tc.entries...)
			if eds != tc.wantEDS {
				t.Errorf("eds service_name = %q, want %q", eds, tc.wantEDS)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("endpoints by priority = %v, want %v", got, tc.want)
			}
		})
	}
}
