package xds

import (
	"reflect"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// failoverChain: api in primaryDC failing over to api in each of dcs.
func failoverChain(primaryDC string, dcs ...string) func(service, dc string) *configentry.Chain {
	return func(service, dc string) *configentry.Chain {
		ch := defaultChain("api", primaryDC)
		ch.Default = false
		id := "api.default.default." + primaryDC
		for _, fdc := range dcs {
			fid := "api.default.default." + fdc
			ch.Targets[id].Failover = append(ch.Targets[id].Failover, fid)
			ch.Targets[fid] = &configentry.Target{ID: fid, Service: "api", Datacenter: fdc}
		}
		return ch
	}
}

// A failover target in another datacenter follows the upstream's mesh
// gateway mode, as in Consul: its endpoints are the gateways of that
// mode, dialed with its own SNI (a transport socket match selected by
// the endpoints' metadata); with no mode (or none) it is dialed directly.
func TestFailoverThroughMeshGateways(t *testing.T) {
	sni := func(dc string) string { return ClusterName("api", dc, testTD) }
	for _, tc := range []struct {
		name, mode, primary string
		failover            []string
		wantGateway         []string // per source
		wantMatches         []string
	}{
		{"no mode", "", "dc1", []string{"dc2"}, []string{"", ""}, nil},
		{"none", "none", "dc1", []string{"dc2"}, []string{"", ""}, nil},
		{"local", "local", "dc1", []string{"dc2"}, []string{"", "local"}, []string{sni("dc2")}},
		{"remote", "remote", "dc1", []string{"dc2"}, []string{"", "remote"}, []string{sni("dc2")}},
		{"remote primary, local and remote failovers", "remote", "dc2", []string{"dc1", "dc3", "dc3"},
			[]string{"remote", "", "remote", "remote"}, []string{sni("dc3")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := chainBuilder(failoverChain(tc.primary, tc.failover...))
			up := catalog.Upstream{DestinationName: "api", Datacenter: tc.primary, LocalBindPort: 9191, MeshGatewayMode: tc.mode}
			res, err := b.proxy(testProxy("web-1", "web", 21000, nil, up))
			if err != nil {
				t.Fatal(err)
			}
			validateAll(t, res)
			if len(res.upstreams) != 1 {
				t.Fatalf("load assignments = %v", res.upstreams)
			}
			k := res.upstreams[0]
			spec := res.specs[k]
			var gws []string
			for _, s := range spec.sources {
				gws = append(gws, s.gateway)
			}
			if !reflect.DeepEqual(gws, tc.wantGateway) {
				t.Errorf("sources' gateway modes = %v, want %v", gws, tc.wantGateway)
			}
			c := findCluster(t, res, sni(tc.primary))
			if err := c.ValidateAll(); err != nil {
				t.Error(err)
			}
			wantEDS := ""
			if len(tc.wantMatches) > 0 || tc.wantGateway[0] != "" {
				wantEDS = meshGatewayCLAName(sni(tc.primary), tc.mode)
			}
			if got := c.GetEdsClusterConfig().GetServiceName(); got != wantEDS || k.clusterName(testTD) != c.GetName() && k.clusterName(testTD) != wantEDS {
				t.Errorf("eds service_name = %q, load assignment %q; want %q", got, k.clusterName(testTD), wantEDS)
			}
			var matches []string
			for _, m := range c.GetTransportSocketMatches() {
				if m.GetMatch().GetFields()["sni"].GetStringValue() != m.GetName() {
					t.Errorf("match %s: %v", m.GetName(), m.GetMatch())
				}
				utls := unpack(t, m.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
				if utls.GetSni() != m.GetName() || utls.GetCommonTlsContext() == nil {
					t.Errorf("match %s: SNI %q", m.GetName(), utls.GetSni())
				}
				matches = append(matches, m.GetName())
			}
			if !reflect.DeepEqual(matches, tc.wantMatches) {
				t.Errorf("transport socket matches = %v, want %v", matches, tc.wantMatches)
			}
			if utls := unpack(t, c.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{}); utls.GetSni() != sni(tc.primary) {
				t.Errorf("cluster SNI = %q, want the primary's", utls.GetSni())
			}
		})
	}
}

// Through a real catalog (mode remote): priority 0 is dc1's api sidecars,
// priority 1 dc2's gateways at their WAN address, marked for dc2's SNI;
// the gateways' own endpoints carry no metadata.
func TestFailoverThroughMeshGatewayEndpoints(t *testing.T) {
	cat := catalog.New()
	for _, inst := range meshGatewayCatalog() {
		cat.Register(inst)
	}
	s := &Server{cfg: Config{Catalog: cat}, b: builder{dc: "dc1", trustDomain: testTD}}
	b := chainBuilder(failoverChain("dc1", "dc2"))
	up := catalog.Upstream{DestinationName: "api", LocalBindPort: 9191, MeshGatewayMode: "remote"}
	res, err := b.proxy(testProxy("web-1", "web", 21000, nil, up))
	if err != nil {
		t.Fatal(err)
	}
	k := res.upstreams[0]
	cla, err := targetAssignment(k.clusterName(testTD), res.specs[k], s.instanceSource(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(cla); err != nil {
		t.Error(err)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Error(err)
	}
	got := map[uint32][]string{}
	for _, l := range cla.GetEndpoints() {
		got[l.GetPriority()] = claHostPorts(&endpoint.ClusterLoadAssignment{Endpoints: []*endpoint.LocalityLbEndpoints{l}})
		for _, e := range l.GetLbEndpoints() {
			m := e.GetMetadata().GetFilterMetadata()[transportSocketMatchKey].GetFields()["sni"].GetStringValue()
			if want := map[uint32]string{1: ClusterName("api", "dc2", testTD)}[l.GetPriority()]; m != want {
				t.Errorf("priority %d endpoint metadata sni = %q, want %q", l.GetPriority(), m, want)
			}
		}
	}
	want := map[uint32][]string{0: {"10.0.0.2:21000"}, 1: {"192.0.2.9:8443"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("endpoints by priority = %v, want %v", got, want)
	}
}
