package xds

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// terminatingClusters builds the gateway of testTerminating with set and
// returns its clusters by name.
func terminatingClusters(t *testing.T, set *configentry.Set, insts map[string][]catalog.ServiceInstance) map[string]*cluster.Cluster {
	t.Helper()
	b := builder{dc: "dc1", trustDomain: testTD, set: set,
		instances: func(svc string) []catalog.ServiceInstance { return insts[svc] }}
	res, err := b.proxy(testTerminating(23000))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*cluster.Cluster{}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		out[c.GetName()] = c
	}
	return out
}

// With an SNI, the originated TLS also checks that the server's
// certificate is for that name (Consul adds a SAN matcher): a certificate
// for any other host under the same CA is refused.
func TestTerminatingGatewayVerifiesSNI(t *testing.T) {
	cs := terminatingClusters(t, configentry.NewSet(terminatingEntry()), nil)
	api := cs[ClusterName("api", "dc1", testTD)]
	if api == nil {
		t.Fatalf("no api cluster in %v", cs)
	}
	up := unpack(t, api.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
	sans := up.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames()
	if len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || sans[0].GetMatcher().GetExact() != "api.example.com" {
		t.Errorf("SAN matchers = %v, want DNS api.example.com", sans)
	}
	// Without an SNI there is no name to check (the CA alone decides).
	e := terminatingEntry()
	e.Services[1].SNI = ""
	api = terminatingClusters(t, configentry.NewSet(e), nil)[ClusterName("api", "dc1", testTD)]
	up = unpack(t, api.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
	if sans := up.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames(); len(sans) != 0 {
		t.Errorf("SAN matchers without SNI = %v", sans)
	}
}

// A grpc (or http2) linked service is spoken to in HTTP/2, as Consul
// configures the gateway's cluster: HTTP/1.1 would break every gRPC call.
func TestTerminatingGatewayHTTP2Service(t *testing.T) {
	set := configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "grpc"},
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db",
			Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}},
		&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{{Name: "db"}}},
	)
	cs := terminatingClusters(t, set, nil)
	for _, name := range []string{ClusterName("db", "dc1", testTD), "v1." + ClusterName("db", "dc1", testTD)} {
		c := cs[name]
		if c == nil {
			t.Fatalf("no cluster %s in %v", name, cs)
		}
		if _, ok := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsID]; !ok {
			t.Errorf("cluster %s speaks HTTP/1.1 to a grpc service", name)
		}
	}
}

// The linked service's resolver sets its clusters' connect timeout and
// load balancing, over the gateway's connect_timeout_ms, as in Consul.
func TestTerminatingGatewayResolverSettings(t *testing.T) {
	set := configentry.NewSet(
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db", ConnectTimeout: 7 * time.Second,
			LoadBalancer: &consul.LoadBalancer{Policy: "least_request"},
			Subsets:      map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}},
		&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{{Name: "db"}}},
	)
	cs := terminatingClusters(t, set, nil)
	for _, name := range []string{ClusterName("db", "dc1", testTD), "v1." + ClusterName("db", "dc1", testTD)} {
		c := cs[name]
		if c == nil {
			t.Fatalf("no cluster %s in %v", name, cs)
		}
		if got := c.GetConnectTimeout().AsDuration(); got != 7*time.Second {
			t.Errorf("cluster %s: connect timeout %s, want the resolver's 7s", name, got)
		}
		if c.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("cluster %s: lb policy %s, want the resolver's least_request", name, c.GetLbPolicy())
		}
	}
	// Without a resolver timeout, the gateway's connect_timeout_ms (2 s).
	set = configentry.NewSet(&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{{Name: "db"}}})
	if got := terminatingClusters(t, set, nil)[ClusterName("db", "dc1", testTD)].GetConnectTimeout().AsDuration(); got != 2*time.Second {
		t.Errorf("connect timeout without a resolver %s, want 2s", got)
	}
}
