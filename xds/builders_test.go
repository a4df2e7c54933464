package xds

import (
	"errors"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthz "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

const testTD = "11111111-2222-3333-4444-555555555555.meshlet"

func testProxy(id, dest string, port int, cfg map[string]any, ups ...catalog.Upstream) catalog.ServiceInstance {
	return catalog.ServiceInstance{
		ID: id, Name: dest + "-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: "10.0.0.1", Port: port, Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: dest, DestinationServiceID: id + "-app", LocalServicePort: 8080, Config: cfg, Upstreams: ups},
	}
}

func unpack[T proto.Message](t *testing.T, a interface{ UnmarshalTo(proto.Message) error }, m T) T {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("unpack %T: %v", m, err)
	}
	return m
}

func TestBuildProxyResourcesValidate(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD}
	escape := `{"name":"custom","address":{"socket_address":{"address":"0.0.0.0","port_value":21000}},
	  "filter_chains":[{"filters":[{"name":"envoy.filters.network.tcp_proxy","typed_config":{
	  "@type":"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy","stat_prefix":"x","cluster":"local_app"}}]}]}`
	cases := []struct {
		name       string
		inst       catalog.ServiceInstance
		listeners  []string
		clusters   []string
		lastFilter string
	}{
		{"tcp no upstreams", testProxy("p1", "web", 21000, nil), []string{"public_listener:0.0.0.0:21000"}, []string{"local_app"}, tcpProxyFilter},
		{"http", testProxy("p1", "web", 21000, map[string]any{"protocol": "http"}), []string{"public_listener:0.0.0.0:21000"}, []string{"local_app"}, hcmFilter},
		{"grpc, timeout as float", testProxy("p1", "web", 21000, map[string]any{"protocol": "grpc", "local_connect_timeout_ms": 250.0}), []string{"public_listener:0.0.0.0:21000"}, []string{"local_app"}, hcmFilter},
		{"upstreams", testProxy("p1", "web", 21001, nil,
			catalog.Upstream{DestinationName: "db", LocalBindPort: 9191},
			catalog.Upstream{DestinationName: "api", LocalBindPort: 9292, LocalBindAddress: "127.0.0.2", Config: map[string]any{"protocol": "http", "connect_timeout_ms": "1500"}},
			catalog.Upstream{DestinationName: "db", LocalBindPort: 9193}),
			[]string{"public_listener:0.0.0.0:21001", "db:127.0.0.1:9191", "api:127.0.0.2:9292", "db:127.0.0.1:9193"},
			[]string{"local_app", ClusterName("db", "dc1", testTD), ClusterName("api", "dc1", testTD)}, tcpProxyFilter},
		{"escape hatch", testProxy("p1", "web", 21000, map[string]any{"envoy_public_listener_json": escape}), []string{"custom"}, []string{"local_app"}, tcpProxyFilter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := b.proxy(tc.inst)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			var gotL, gotC []string
			for _, l := range res.listeners {
				gotL = append(gotL, l.GetName())
				if err := envoyvalidate.All(l); err != nil {
					t.Errorf("listener %s: %v", l.GetName(), err)
				}
			}
			for _, c := range res.clusters {
				gotC = append(gotC, c.GetName())
				if err := envoyvalidate.All(c); err != nil {
					t.Errorf("cluster %s: %v", c.GetName(), err)
				}
			}
			if strings.Join(gotL, ",") != strings.Join(tc.listeners, ",") {
				t.Errorf("listeners = %v, want %v", gotL, tc.listeners)
			}
			if strings.Join(gotC, ",") != strings.Join(tc.clusters, ",") {
				t.Errorf("clusters = %v, want %v", gotC, tc.clusters)
			}
			fs := res.listeners[0].GetFilterChains()[0].GetFilters()
			if got := fs[len(fs)-1].GetName(); got != tc.lastFilter {
				t.Errorf("last public filter = %s, want %s", got, tc.lastFilter)
			}
			if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
				t.Errorf("consistency: %v", err)
			}
		})
	}
}

func TestPublicListenerShape(t *testing.T) {
	l, err := publicListener(21000, "web", protoTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	fc := l.GetFilterChains()[0]
	if len(fc.GetFilters()) != 2 || fc.GetFilters()[0].GetName() != extAuthzFilter {
		t.Fatalf("filters = %v, want ext_authz then tcp_proxy", fc.GetFilters())
	}
	az := unpack(t, fc.GetFilters()[0].GetTypedConfig(), &extauthz.ExtAuthz{})
	if az.GetStatPrefix() != "connect_authz" || az.GetGrpcService().GetEnvoyGrpc().GetClusterName() != LocalAgentCluster ||
		az.GetFailureModeAllow() || !az.GetIncludePeerCertificate() {
		t.Errorf("ext_authz = %v", az)
	}
	tp := unpack(t, fc.GetFilters()[1].GetTypedConfig(), &tcpproxy.TcpProxy{})
	if tp.GetStatPrefix() != "public_listener_tcp" || tp.GetCluster() != LocalAppCluster {
		t.Errorf("tcp_proxy = %v", tp)
	}
	dtc := unpack(t, fc.GetTransportSocket().GetTypedConfig(), &tlsv3.DownstreamTlsContext{})
	if !dtc.GetRequireClientCertificate().GetValue() {
		t.Error("client certificate not required")
	}
	ctc := dtc.GetCommonTlsContext()
	if ctc.GetTlsCertificateSdsSecretConfigs()[0].GetName() != "leaf:web" || ctc.GetValidationContextSdsSecretConfig().GetName() != RootsSecret {
		t.Errorf("sds names = %v", ctc)
	}
}

func TestUpstreamClusterVerifiesIdentity(t *testing.T) {
	name := ClusterName("db", "dc1", testTD)
	c, err := upstreamCluster(name, "web", SpiffeID(testTD, "dc1", "db"), 1500, protoTCP)
	if err != nil {
		t.Fatal(err)
	}
	if c.GetType() != cluster.Cluster_EDS || c.GetLbPolicy() != cluster.Cluster_ROUND_ROBIN || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Errorf("cluster discovery = %v", c)
	}
	if c.GetConnectTimeout().AsDuration().Milliseconds() != 1500 {
		t.Errorf("connect timeout = %v", c.GetConnectTimeout())
	}
	utc := unpack(t, c.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
	if utc.GetSni() != name {
		t.Errorf("sni = %q", utc.GetSni())
	}
	cv := utc.GetCommonTlsContext().GetCombinedValidationContext()
	san := cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
	if len(san) != 1 || san[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI ||
		san[0].GetMatcher().GetExact() != "spiffe://"+testTD+"/ns/default/dc/dc1/svc/db" {
		t.Errorf("san matcher = %v", san)
	}
	if cv.GetValidationContextSdsSecretConfig().GetName() != RootsSecret ||
		utc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName() != "leaf:web" {
		t.Errorf("sds = %v", utc.GetCommonTlsContext())
	}
}

func TestProxylessResourcesValidate(t *testing.T) {
	plain := []catalog.ServiceInstance{
		{ID: "a", Name: "greeter", Address: "127.0.0.1", Port: 5000, Healthy: true},
		{ID: "b", Name: "greeter", Address: "127.0.0.1", Port: 5001, Healthy: false},
		{ID: "c", Name: "greeter", Address: "", Port: 5002, Healthy: true},
	}
	l, c, cla, err := proxylessResources("greeter", "dc1", plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []proto.Message{l, c, cla} {
		if err := envoyvalidate.All(m); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
	m := unpack(t, l.GetApiListener().GetApiListener(), &hcm.HttpConnectionManager{})
	fs := m.GetHttpFilters()
	if len(fs) == 0 || fs[len(fs)-1].GetName() != routerFilter {
		t.Errorf("http filters = %v, want router last", fs)
	}
	vh := m.GetRouteConfig().GetVirtualHosts()[0]
	if vh.GetDomains()[0] != "greeter" || vh.GetRoutes()[0].GetRoute().GetCluster() != "greeter" {
		t.Errorf("virtual host = %v", vh)
	}
	eps := cla.GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 || eps[0].GetLoadBalancingWeight().GetValue() == 0 ||
		eps[0].GetLbEndpoints()[0].GetLoadBalancingWeight().GetValue() == 0 {
		t.Errorf("endpoints = %v, want one healthy endpoint with non-zero weights", eps)
	}
}

func TestSecretsValidate(t *testing.T) {
	c := newTestCA(t)
	roots, err := rootsSecret(c.Roots())
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := c.Leaf(t.Context(), "web")
	ls, err := leafSecret("web", leaf)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []proto.Message{roots, ls} {
		if err := envoyvalidate.All(m); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
	if _, err := leafSecret("web", nil); !errors.Is(err, ErrNoLeaf) {
		t.Errorf("nil leaf: err = %v, want ErrNoLeaf", err)
	}
}

func TestProxyConfigErrors(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD}
	cases := []struct {
		name string
		inst catalog.ServiceInstance
		want string
	}{
		{"bad protocol", testProxy("p", "web", 21000, map[string]any{"protocol": "udp"}), "protocol"},
		{"protocol not string", testProxy("p", "web", 21000, map[string]any{"protocol": 7}), "protocol"},
		{"bad timeout", testProxy("p", "web", 21000, map[string]any{"local_connect_timeout_ms": "soon"}), "local_connect_timeout_ms"},
		{"negative timeout", testProxy("p", "web", 21000, map[string]any{"local_connect_timeout_ms": -5}), "local_connect_timeout_ms"},
		{"invalid escape json", testProxy("p", "web", 21000, map[string]any{"envoy_public_listener_json": "{nope"}), "envoy_public_listener_json"},
		{"escape json fails validation", testProxy("p", "web", 21000, map[string]any{"envoy_public_listener_json": `{"filter_chains":[{"filters":[{"name":"envoy.filters.network.tcp_proxy","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy","cluster":"local_app"}}]}]}`}), "StatPrefix"},
		{"duplicate bind", testProxy("p", "web", 21000, nil, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191}, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191}), "local_bind_port"},
		{"upstream without port", testProxy("p", "web", 21000, nil, catalog.Upstream{DestinationName: "db"}), "port 0"},
		{"upstream protocol conflict", testProxy("p", "web", 21000, nil, catalog.Upstream{DestinationName: "db", LocalBindPort: 1}, catalog.Upstream{DestinationName: "db", LocalBindPort: 2, Config: map[string]any{"protocol": "grpc"}}), "disagree"},
		{"no public port", testProxy("p", "web", 0, nil), "public listener"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.proxy(tc.inst)
			if !errors.Is(err, ErrInvalidProxyConfig) {
				t.Fatalf("err = %v, want ErrInvalidProxyConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line mentioning %q", err, tc.want)
			}
		})
	}
}

// An escape-hatch listener that fails to decode or validate keeps the
// decoder's or validator's error in the chain.
func TestProxyConfigErrorsKeepCause(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD}
	_, err := b.proxy(testProxy("p", "web", 21000, map[string]any{"envoy_public_listener_json": "{nope"}))
	if u, ok := err.(interface{ Unwrap() []error }); !ok || len(u.Unwrap()) != 2 {
		t.Errorf("invalid JSON: %v does not wrap the decoder's error", err)
	}
	bad := `{"filter_chains":[{"filters":[{"name":"envoy.filters.network.tcp_proxy","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy","cluster":"local_app"}}]}]}`
	_, err = b.proxy(testProxy("p", "web", 21000, map[string]any{"envoy_public_listener_json": bad}))
	var multi tcpproxy.TcpProxyMultiError
	if !errors.Is(err, ErrInvalidProxyConfig) || !errors.As(err, &multi) {
		t.Errorf("failed validation: %v does not wrap the validator's error", err)
	}
}

// ValidateAll stops at Any fields; envoyvalidate.All must not.
func TestValidateDeepLooksInsideAny(t *testing.T) {
	f, err := networkFilter(tcpProxyFilter, &tcpproxy.TcpProxy{ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "x"}}) // no stat_prefix
	if err != nil {
		t.Fatal(err)
	}
	l := &listener.Listener{Name: "l", Address: socketAddress("127.0.0.1", 1), FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{f}}}}
	if err := l.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll unexpectedly saw inside the Any: %v", err)
	}
	if err := envoyvalidate.All(l); err == nil || !strings.Contains(err.Error(), "StatPrefix") {
		t.Fatalf("envoyvalidate.All = %v, want the nested StatPrefix error", err)
	}
}

func TestCheckConsistent(t *testing.T) {
	pub, _ := publicListener(21000, "web", protoHTTP, nil)
	local, _ := localAppCluster("127.0.0.1", 8080, 5000, protoTCP)
	upName := ClusterName("db", "dc1", testTD)
	up, _ := upstreamCluster(upName, "web", SpiffeID(testTD, "dc1", "db"), 5000, protoTCP)
	upL, _ := upstreamListener("db", "127.0.0.1", 9191, upName, protoTCP)
	rds := proto.Clone(pub).(*listener.Listener)
	m := unpack(t, rds.GetFilterChains()[0].GetFilters()[1].GetTypedConfig(), &hcm.HttpConnectionManager{})
	m.RouteSpecifier = &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "r", ConfigSource: adsSource()}}
	a, _ := anyOf(m)
	rds.GetFilterChains()[0].GetFilters()[1].ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
	all := func(string, string) bool { return true }
	cases := []struct {
		name      string
		listeners []proto.Message
		clusters  []proto.Message
		routes    []proto.Message
		exists    func(string, string) bool
		want      string
	}{
		{"ok", []proto.Message{pub, upL}, []proto.Message{local, up}, nil, all, ""},
		{"missing cluster", []proto.Message{pub, upL}, []proto.Message{local}, nil, all, upName},
		{"missing endpoints", []proto.Message{upL}, []proto.Message{up}, nil, func(t, n string) bool { return t != endpointType }, "endpoints"},
		{"missing secret", []proto.Message{pub}, []proto.Message{local}, nil, func(t, n string) bool { return n != "leaf:web" }, "leaf:web"},
		{"rds not served", []proto.Message{rds}, []proto.Message{local}, nil, all, "RDS"},
		{"rds served", []proto.Message{rds}, []proto.Message{local}, []proto.Message{rdsRoutes("r", LocalAppCluster)}, all, ""},
		{"route to missing cluster", []proto.Message{rds}, []proto.Message{local}, []proto.Message{rdsRoutes("r", upName)}, all, upName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkConsistent(tc.listeners, tc.clusters, tc.routes, tc.exists)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInconsistent mentioning %q", err, tc.want)
			}
		})
	}
}

// rdsRoutes is a route configuration sending everything to cluster.
func rdsRoutes(name, cluster string) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{
		Name: name, Domains: []string{"*"},
		Routes: []*route.Route{{
			Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}
