package xds

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// A local service's resolver sets the connect timeout and (unless hash
// based: the gateway sees no HTTP) the load balancing of the mesh
// gateway's clusters for it and its subsets, as in Consul.
func TestMeshGatewayResolverSettings(t *testing.T) {
	insts := meshGatewayCatalog()
	set := configentry.NewSet(
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api", ConnectTimeout: 7 * time.Second,
			LoadBalancer: &consul.LoadBalancer{Policy: "least_request"},
			Subsets:      map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}},
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web",
			LoadBalancer: &consul.LoadBalancer{Policy: "ring_hash"}},
	)
	b := builder{dc: "dc1", trustDomain: testTD, set: set, proxies: func() []catalog.ServiceInstance { return insts }}
	res, err := b.proxy(insts[4])
	if err != nil {
		t.Fatal(err)
	}
	cs := map[string]*cluster.Cluster{}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		cs[c.GetName()] = c
	}
	for _, name := range []string{ClusterName("api", "dc1", testTD), "v1." + ClusterName("api", "dc1", testTD)} {
		c := cs[name]
		if c == nil {
			t.Fatalf("no cluster %s", name)
		}
		if got := c.GetConnectTimeout().AsDuration(); got != 7*time.Second {
			t.Errorf("cluster %s: connect timeout %s, want the resolver's 7s", name, got)
		}
		if c.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("cluster %s: lb policy %s, want least_request", name, c.GetLbPolicy())
		}
	}
	web := cs[ClusterName("web", "dc1", testTD)]
	if web.GetLbPolicy() != cluster.Cluster_ROUND_ROBIN || web.GetConnectTimeout().AsDuration() != 5*time.Second {
		t.Errorf("web (ring_hash, no timeout): lb %s, timeout %s; want round robin, 5s", web.GetLbPolicy(), web.GetConnectTimeout().AsDuration())
	}
}
