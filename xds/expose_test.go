package xds

import (
	"errors"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func exposeProxy(paths ...catalog.ExposePath) catalog.ServiceInstance {
	inst := testProxy("p1", "web", 21000, map[string]any{"protocol": "http"},
		catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	inst.Proxy.Expose = paths
	return inst
}

// Expose paths become plain-HTTP listeners (no TLS, no ext_authz) on
// 0.0.0.0:<listener_port>, routing exactly their paths to local clusters;
// everything validates and is consistent.
func TestExposePathsResources(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD}
	res, err := b.proxy(exposeProxy(
		catalog.ExposePath{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: 25001},
		catalog.ExposePath{Path: "/metrics", LocalPathPort: 9102, ListenerPort: 25001},
		catalog.ExposePath{Path: "/grpc.health.v1.Health/Check", Protocol: "http2", LocalPathPort: 8080, ListenerPort: 25002},
	))
	if err != nil {
		t.Fatal(err)
	}
	var ls, cs []proto.Message
	names := map[string]proto.Message{}
	for _, l := range res.listeners {
		ls, names[l.GetName()] = append(ls, l), l
	}
	for _, c := range res.clusters {
		cs, names[c.GetName()] = append(cs, c), c
	}
	for _, m := range append(append([]proto.Message{}, ls...), cs...) {
		if err := envoyvalidate.All(m); err != nil {
			t.Errorf("%T invalid: %v", m, err)
		}
	}
	all := func(string, string) bool { return true }
	if err := checkConsistent(ls, cs, nil, all); err != nil {
		t.Errorf("inconsistent: %v", err)
	}
	if len(res.listeners) != 4 || len(res.clusters) != 5 {
		t.Fatalf("%d listeners, %d clusters; want public+upstream+2 exposed, local_app+db+3 exposed", len(res.listeners), len(res.clusters))
	}

	l1, _ := names[ExposeListenerName(25001)].(*listener.Listener)
	if l1 == nil {
		t.Fatalf("no listener %q", ExposeListenerName(25001))
	}
	sa := l1.GetAddress().GetSocketAddress()
	if sa.GetAddress() != "0.0.0.0" || sa.GetPortValue() != 25001 {
		t.Errorf("expose listener binds %s:%d", sa.GetAddress(), sa.GetPortValue())
	}
	fc := l1.GetFilterChains()[0]
	if fc.GetTransportSocket() != nil || len(fc.GetFilters()) != 1 || fc.GetFilters()[0].GetName() != hcmFilter {
		t.Fatalf("expose listener chain: TLS %v, filters %v; want plain HTTP, the HCM only", fc.GetTransportSocket(), fc.GetFilters())
	}
	m := unpack(t, fc.GetFilters()[0].GetTypedConfig(), &hcm.HttpConnectionManager{})
	routes := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 {
		t.Fatalf("routes %v", routes)
	}
	for i, want := range [][2]string{{"/health", "exposed_cluster_8080"}, {"/metrics", "exposed_cluster_9102"}} {
		r := routes[i]
		if r.GetMatch().GetPath() != want[0] || r.GetMatch().GetPrefix() != "" || r.GetRoute().GetCluster() != want[1] {
			t.Errorf("route %d = %v, want exact %s -> %s", i, r, want[0], want[1])
		}
	}

	c, _ := names["exposed_cluster_8080"].(*cluster.Cluster)
	ep := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if ep.GetAddress() != "127.0.0.1" || ep.GetPortValue() != 8080 || len(c.GetTypedExtensionProtocolOptions()) != 0 {
		t.Errorf("exposed_cluster_8080 = %v", c)
	}
	h2, _ := names["exposed_cluster_8080_http2"].(*cluster.Cluster)
	if h2 == nil || len(h2.GetTypedExtensionProtocolOptions()) != 1 {
		t.Errorf("the http2 path's cluster lacks HTTP/2 options: %v", h2)
	}
	l2, _ := names[ExposeListenerName(25002)].(*listener.Listener)
	m2 := unpack(t, l2.GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &hcm.HttpConnectionManager{})
	if r := m2.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]; r.GetRoute().GetCluster() != "exposed_cluster_8080_http2" {
		t.Errorf("http2 route = %v", r)
	}
}

func TestExposePathErrors(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD}
	cases := []struct {
		name string
		path catalog.ExposePath
		want string
	}{
		{"public port", catalog.ExposePath{Path: "/h", LocalPathPort: 8080, ListenerPort: 21000}, "public_listener"},
		{"upstream port", catalog.ExposePath{Path: "/h", LocalPathPort: 8080, ListenerPort: 9191}, "db:127.0.0.1:9191"},
		{"relative path", catalog.ExposePath{Path: "h", LocalPathPort: 8080, ListenerPort: 25001}, "must start"},
		{"protocol", catalog.ExposePath{Path: "/h", Protocol: "grpc", LocalPathPort: 8080, ListenerPort: 25001}, "protocol"},
		{"no listener port", catalog.ExposePath{Path: "/h", LocalPathPort: 8080}, "out of range"},
		{"no local port", catalog.ExposePath{Path: "/h", ListenerPort: 25001}, "local_path_port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.proxy(exposeProxy(tc.path))
			if !errors.Is(err, ErrInvalidProxyConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidProxyConfig mentioning %q", err, tc.want)
			}
		})
	}
}
