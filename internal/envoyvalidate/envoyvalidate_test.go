package envoyvalidate

import (
	"errors"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Paths of the packed messages in the fixtures, as All names them.
const (
	listenerPath = "envoy.config.listener.v3.Listener"
	hcmPath      = listenerPath + ".filter_chains[0].filters[0].typed_config<envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager>"
	routerPath   = hcmPath + ".http_filters[0].typed_config<envoy.extensions.filters.http.router.v3.Router>"
	dtlsPath     = listenerPath + ".filter_chains[0].transport_socket.typed_config<envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext>"
	clusterPath  = "envoy.config.cluster.v3.Cluster"
	utlsPath     = clusterPath + ".transport_socket.typed_config<envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext>"
	optsKey      = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	optsPath     = clusterPath + ".typed_extension_protocol_options[" + optsKey + "]<" + optsKey + ">"
)

// parts are the messages a fixture packs into Anys; a case breaks one of
// them before the fixture is built.
type parts struct {
	hcm     *hcm.HttpConnectionManager
	router  *router.Router
	dtls    *tlsv3.DownstreamTlsContext
	utls    *tlsv3.UpstreamTlsContext
	opts    *httpopts.HttpProtocolOptions
	timeout time.Duration
	// filter, when set, replaces the packed HTTP connection manager.
	filter *anypb.Any
}

func validParts() *parts {
	routes := &route.RouteConfiguration{Name: "local", VirtualHosts: []*route.VirtualHost{{
		Name: "all", Domains: []string{"*"}, Routes: []*route.Route{{
			Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "app"}}},
		}},
	}}}
	return &parts{
		hcm:    &hcm.HttpConnectionManager{StatPrefix: "public", RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: routes}},
		router: &router.Router{},
		dtls: &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2}}},
		utls: &tlsv3.UpstreamTlsContext{Sni: "app.default", CommonTlsContext: &tlsv3.CommonTlsContext{}},
		opts: &httpopts.HttpProtocolOptions{UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}}}}},
		timeout: 5 * time.Second,
	}
}

func pack(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatalf("failed to pack %T: %v", m, err)
	}
	return a
}

func address(port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
}

func tlsSocket(a *anypb.Any) *core.TransportSocket {
	return &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
}

// listener packs the router into the HTTP connection manager, and that and
// the downstream TLS context into the listener's filter chain.
func (p *parts) listener(t *testing.T) proto.Message {
	h := proto.Clone(p.hcm).(*hcm.HttpConnectionManager)
	h.HttpFilters = []*hcm.HttpFilter{{Name: "envoy.filters.http.router",
		ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: pack(t, p.router)}}}
	filter := p.filter
	if filter == nil {
		filter = pack(t, h)
	}
	return &listener.Listener{Name: "public", Address: address(21000), FilterChains: []*listener.FilterChain{{
		Filters: []*listener.Filter{{Name: "envoy.filters.network.http_connection_manager",
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: filter}}},
		TransportSocket: tlsSocket(pack(t, p.dtls)),
	}}}
}

// cluster packs the upstream TLS context and the HTTP protocol options
// (a map entry) into a static cluster.
func (p *parts) cluster(t *testing.T) proto.Message {
	return &cluster.Cluster{
		Name: "app", ConnectTimeout: durationpb.New(p.timeout),
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		LoadAssignment: &endpoint.ClusterLoadAssignment{ClusterName: "app", Endpoints: []*endpoint.LocalityLbEndpoints{{
			LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{
				Endpoint: &endpoint.Endpoint{Address: address(8080)}}}},
		}}},
		TransportSocket:               tlsSocket(pack(t, p.utls)),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{optsKey: pack(t, p.opts)},
	}
}

func TestAllAcceptsValidListenerAndCluster(t *testing.T) {
	p := validParts()
	for _, m := range []proto.Message{p.listener(t), p.cluster(t)} {
		if err := All(m); err != nil {
			t.Errorf("All(%s) = %v, want nil", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
}

// TestAllFindsInvalidFields breaks one field per case and checks that the
// error starts with the path to the message that failed and names the
// field. For a field inside an Any, the outer message's own ValidateAll
// must pass (it does not look into Anys), so the error is All's doing.
func TestAllFindsInvalidFields(t *testing.T) {
	tests := []struct {
		name     string
		build    func(*parts, *testing.T) proto.Message
		breakIt  func(*parts)
		path     string
		field    string
		inPacked bool
	}{
		{"HTTP connection manager in a listener filter", (*parts).listener,
			func(p *parts) { p.hcm.StatPrefix = "" }, hcmPath, "HttpConnectionManager.StatPrefix", true},
		{"router inside the packed HTTP connection manager", (*parts).listener,
			func(p *parts) { p.router.StrictCheckHeaders = []string{"x-bogus"} }, routerPath, "Router.StrictCheckHeaders[0]", true},
		{"downstream TLS context in a listener transport socket", (*parts).listener,
			func(p *parts) { p.dtls.CommonTlsContext.TlsParams.TlsMinimumProtocolVersion = 99 }, dtlsPath,
			"TlsParameters.TlsMinimumProtocolVersion", true},
		{"upstream TLS context in a cluster transport socket", (*parts).cluster,
			func(p *parts) { p.utls.Sni = strings.Repeat("a", 256) }, utlsPath, "UpstreamTlsContext.Sni", true},
		{"protocol options in a cluster's map of Anys", (*parts).cluster,
			func(p *parts) { p.opts.UpstreamProtocolOptions = nil }, optsPath, "HttpProtocolOptions.UpstreamProtocolOptions", true},
		{"a cluster's own field", (*parts).cluster,
			func(p *parts) { p.timeout = 0 }, clusterPath, "Cluster.ConnectTimeout", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := validParts()
			tc.breakIt(p)
			m := tc.build(p, t)
			outer := m.(interface{ ValidateAll() error }).ValidateAll()
			if tc.inPacked && outer != nil {
				t.Fatalf("the outer ValidateAll already failed (%v): the case does not test All", outer)
			}
			err := All(m)
			if err == nil {
				t.Fatal("All = nil, want an error")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.path+": ") || !strings.Contains(msg, tc.field) {
				t.Fatalf("All = %q\nwant prefix %q and field %q", msg, tc.path+": ", tc.field)
			}
		})
	}
}

// The validator's error stays in the chain (wrapped with %w).
func TestAllWrapsTheValidatorError(t *testing.T) {
	p := validParts()
	p.hcm.StatPrefix = ""
	err := All(p.listener(t))
	var multi hcm.HttpConnectionManagerMultiError
	if !errors.As(err, &multi) || len(multi.AllErrors()) != 1 {
		t.Fatalf("All = %v, want it to wrap one HttpConnectionManagerMultiError", err)
	}
}

func TestAllReportsAnAnyItCannotUnpack(t *testing.T) {
	hcmURL := pack(t, &hcm.HttpConnectionManager{}).GetTypeUrl()
	tests := []struct {
		name string
		a    *anypb.Any
		is   error
	}{
		{"unknown type", &anypb.Any{TypeUrl: "type.googleapis.com/meshlet.test.Nope"}, protoregistry.NotFound},
		{"undecodable bytes", &anypb.Any{TypeUrl: hcmURL, Value: []byte{0xff}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := validParts()
			p.filter = tc.a
			err := All(p.listener(t))
			want := listenerPath + ".filter_chains[0].filters[0].typed_config: failed to unpack " + tc.a.GetTypeUrl() + ": "
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("All = %v, want prefix %q", err, want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("All = %v, want it to wrap %v", err, tc.is)
			}
		})
	}
}
