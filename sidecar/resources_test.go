package sidecar

import (
	"github.com/meshlet/meshlet/internal/testutil"
	"net"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Test resource builders, in the shapes meshlet's xDS server emits (Consul's
// connect sidecar conventions).

func mustPack(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatalf("failed to pack %T: %v", m, err)
	}
	return a
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
}

func socketAddr(ip string, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// freePort returns a port that stays free for the test (see testutil.FreePort).
func freePort(t testing.TB) int { return testutil.FreePort(t) }

func hostPort(addr string) (string, int) {
	h, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return h, n
}

func sdsConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

func extAuthzFilter(t testing.TB) *listenerv3.Filter {
	return &listenerv3.Filter{Name: "envoy.filters.network.ext_authz", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, &extauthzv3.ExtAuthz{
		StatPrefix: "connect_authz",
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "local_agent"}},
			Timeout: durationpb.New(10 * time.Second)},
		TransportApiVersion: corev3.ApiVersion_V3,
	})}}
}

func tcpProxyFilter(t testing.TB, statPrefix, cluster string) *listenerv3.Filter {
	return &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, &tcpproxyv3.TcpProxy{
		StatPrefix: statPrefix, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster},
	})}}
}

func routerHTTPFilter(t testing.TB) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustPack(t, &routerv3.Router{})}}
}

// hcmFilter builds an HTTP connection manager with either an inline route
// config (rc) or RDS (rdsName), relaying websocket upgrades (as meshlet's
// HCMs do).
func hcmFilter(t testing.TB, statPrefix string, rc *routev3.RouteConfiguration, rdsName string) *listenerv3.Filter {
	h := &hcmv3.HttpConnectionManager{
		StatPrefix:     statPrefix,
		HttpFilters:    []*hcmv3.HttpFilter{routerHTTPFilter(t)},
		UpgradeConfigs: []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}},
	}
	if rc != nil {
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
	} else {
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rdsName, ConfigSource: adsSource()}}
	}
	return &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, h)}}
}

// routeToCluster is a route config sending every path on any host to cluster.
func routeToCluster(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: name, Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// publicListener is the mTLS listener in front of the local app: TLS with a
// required client certificate, ext_authz, then the terminal filter.
func publicListener(t testing.TB, port int, leafSecret, rootsSecret string, terminal *listenerv3.Filter) *listenerv3.Listener {
	tlsCtx := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(leafSecret)},
			ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sdsConfig(rootsSecret)},
		},
	}
	return &listenerv3.Listener{
		Name:    "public_listener:127.0.0.1:" + strconv.Itoa(port),
		Address: socketAddr("127.0.0.1", port),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{extAuthzFilter(t), terminal},
			TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustPack(t, tlsCtx)}},
		}},
	}
}

// upstreamListener is a plaintext loopback listener for an upstream.
func upstreamListener(dest string, port int, terminal *listenerv3.Filter) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:         dest + ":127.0.0.1:" + strconv.Itoa(port),
		Address:      socketAddr("127.0.0.1", port),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{terminal}}},
	}
}

func cla(name string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	var eps []*endpointv3.LbEndpoint
	for _, a := range addrs {
		ip, port := hostPort(a)
		eps = append(eps, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddr(ip, port)}},
			HealthStatus:   corev3.HealthStatus_HEALTHY,
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}}
}

// localAppCluster is the STATIC cluster of the local service.
func localAppCluster(addr string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 "local_app",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(5 * time.Second),
		LoadAssignment:       cla("local_app", addr),
	}
}

// upstreamCluster is an EDS cluster with upstream mTLS that verifies the
// destination's SPIFFE ID.
func upstreamCluster(t testing.TB, svc, leafSecret, rootsSecret string) *clusterv3.Cluster {
	tlsCtx := &tlsv3.UpstreamTlsContext{
		Sni: sniFor(svc),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(leafSecret)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: tlsv3.SubjectAltNameMatcher_URI,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: spiffeID(svc)}},
				}}},
				ValidationContextSdsSecretConfig: sdsConfig(rootsSecret),
			}},
		},
	}
	return &clusterv3.Cluster{
		Name:                 sniFor(svc),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout:       durationpb.New(2 * time.Second),
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustPack(t, tlsCtx)}},
	}
}

func certSecret(name string, l *testLeaf) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: l.certPEM}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(l.keyPEM)}},
	}}}
}

func rootsSecret(name string, cas ...*testCA) *tlsv3.Secret {
	pemBundle := ""
	for _, ca := range cas {
		pemBundle += ca.certPEM
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: pemBundle}},
	}}}
}
