package xds

import (
	"fmt"
	"net"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	extauthz "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Filter names, as Envoy registers them.
const (
	extAuthzFilter = "envoy.filters.network.ext_authz"
	tcpProxyFilter = "envoy.filters.network.tcp_proxy"
	hcmFilter      = "envoy.filters.network.http_connection_manager"
	routerFilter   = "envoy.filters.http.router"

	publicBindAddr = "0.0.0.0"
)

// PublicListenerName is the name of a proxy's inbound listener.
func PublicListenerName(port int) string {
	return "public_listener:" + net.JoinHostPort(publicBindAddr, strconv.Itoa(port))
}

// UpstreamListenerName is the name of a proxy's listener for an upstream.
func UpstreamListenerName(dest, bindAddr string, port int) string {
	return dest + ":" + net.JoinHostPort(bindAddr, strconv.Itoa(port))
}

func networkFilter(name string, cfg proto.Message) (*listener.Filter, error) {
	a, err := anyOf(cfg)
	if err != nil {
		return nil, err
	}
	return &listener.Filter{Name: name, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}, nil
}

func tcpProxy(statPrefix, clusterName string) (*listener.Filter, error) {
	return networkFilter(tcpProxyFilter, &tcpproxy.TcpProxy{
		StatPrefix:       statPrefix,
		ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: clusterName},
	})
}

// websocketUpgrades are the upgrade_configs of every HTTP connection
// manager, as Consul's: Envoy relays an upgrade only if its type is
// listed, so websocket is, and any other type is refused (403).
func websocketUpgrades() []*hcm.HttpConnectionManager_UpgradeConfig {
	return []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
}

// httpManager is an HTTP connection manager with an inline route config
// sending every request to clusterName; the router is the last HTTP filter
// (after pre), which Envoy and gRPC-Go both require. It relays websocket
// upgrades (websocketUpgrades).
func httpManager(statPrefix, routeName, clusterName string, domains []string, pre ...*hcm.HttpFilter) (*hcm.HttpConnectionManager, error) {
	r, err := anyOf(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	return &hcm.HttpConnectionManager{
		StatPrefix:     statPrefix,
		CodecType:      hcm.HttpConnectionManager_AUTO,
		UpgradeConfigs: websocketUpgrades(),
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: routeName,
			VirtualHosts: []*route.VirtualHost{{
				Name:    routeName,
				Domains: domains,
				Routes: []*route.Route{{
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterName},
					}},
				}},
			}},
		}},
		HttpFilters: append(pre, &hcm.HttpFilter{Name: routerFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: r}}),
	}, nil
}

// publicListener accepts mTLS from other sidecars on 0.0.0.0:port, asks the
// agent (ext_authz, fail closed) whether the peer may connect, then proxies
// to local_app; for HTTP it also asks about every request (httpExtAuthz).
func publicListener(port int, service string, prot protocol, rqTimeout *durationpb.Duration) (*listener.Listener, error) {
	fc, err := publicChain(service, prot, inboundRoute{timeout: rqTimeout}, LocalAppCluster)
	if err != nil {
		return nil, err
	}
	return &listener.Listener{
		Name:             PublicListenerName(port),
		Address:          socketAddress(publicBindAddr, port),
		TrafficDirection: core.TrafficDirection_INBOUND,
		FilterChains:     []*listener.FilterChain{fc},
	}, nil
}

// inboundRoute is what an inbound HTTP route's action carries besides its
// cluster: a request timeout (nil: Envoy's default) and hash policies (a
// terminating gateway's ring_hash or maglev linked service).
type inboundRoute struct {
	timeout *durationpb.Duration
	hash    []*route.RouteAction_HashPolicy
}

// publicChain is an inbound filter chain: mTLS presenting service's leaf
// (so ext_authz sees service as the destination), the authorization
// filter, then tcp_proxy or an HTTP connection manager to clusterName
// (its route as rt says).
func publicChain(service string, prot protocol, rt inboundRoute, clusterName string) (*listener.FilterChain, error) {
	authz, err := networkFilter(extAuthzFilter, &extauthz.ExtAuthz{
		StatPrefix:             "connect_authz",
		GrpcService:            &core.GrpcService{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: LocalAgentCluster}}},
		FailureModeAllow:       false,
		IncludePeerCertificate: true,
		TransportApiVersion:    core.ApiVersion_V3,
	})
	if err != nil {
		return nil, err
	}
	var last *listener.Filter
	if prot.isHTTP() {
		az, err := httpExtAuthz()
		if err != nil {
			return nil, err
		}
		m, err := httpManager("public_listener_http", "public_listener", clusterName, []string{"*"}, az)
		if err != nil {
			return nil, err
		}
		action := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
		action.Timeout, action.HashPolicy = rt.timeout, rt.hash
		// L7 intentions match the path the app will see: RFC 3986
		// normalization (Consul's default on inbound listeners) and
		// merged slashes, so /./admin, /x/../admin, /%61dmin and //admin
		// are /admin to ext_authz and to the app.
		m.NormalizePath = wrapperspb.Bool(true)
		m.MergeSlashes = true
		last, err = networkFilter(hcmFilter, m)
		if err != nil {
			return nil, err
		}
	} else if last, err = tcpProxy("public_listener_tcp", clusterName); err != nil {
		return nil, err
	}
	sock, err := tlsSocket(&tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(LeafSecretName(service))},
			ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sdsConfig(RootsSecret)},
		},
	})
	if err != nil {
		return nil, err
	}
	return &listener.FilterChain{Filters: []*listener.Filter{authz, last}, TransportSocket: sock}, nil
}

// upstreamListener binds the local side of an upstream and proxies to the
// destination's EDS cluster.
func upstreamListener(dest, bindAddr string, port int, clusterName string, prot protocol) (*listener.Listener, error) {
	statPrefix := "upstream." + dest
	var f *listener.Filter
	var err error
	if prot.isHTTP() {
		m, merr := httpManager(statPrefix, dest, clusterName, []string{"*"})
		if merr != nil {
			return nil, merr
		}
		f, err = networkFilter(hcmFilter, m)
	} else {
		f, err = tcpProxy(statPrefix, clusterName)
	}
	if err != nil {
		return nil, err
	}
	return outboundListener(dest, bindAddr, port, f), nil
}

// outboundListener is an upstream's listener on bindAddr:port with one
// filter chain ending in f.
func outboundListener(dest, bindAddr string, port int, f *listener.Filter) *listener.Listener {
	return &listener.Listener{
		Name:             UpstreamListenerName(dest, bindAddr, port),
		Address:          socketAddress(bindAddr, port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		FilterChains:     []*listener.FilterChain{{Filters: []*listener.Filter{f}}},
	}
}

// proxylessListener is what gRPC-Go's xDS resolver asks for when dialing
// xds:///<service>: an api_listener whose route sends everything for the
// virtual host <service> to the cluster <service>.
func proxylessListener(service string) (*listener.Listener, error) {
	m, err := httpManager("proxyless."+service, service, service, []string{service})
	if err != nil {
		return nil, err
	}
	a, err := anyOf(m)
	if err != nil {
		return nil, err
	}
	return &listener.Listener{Name: service, ApiListener: &listener.ApiListener{ApiListener: a}}, nil
}

// validBind checks a listener address and port before they reach Envoy.
func validBind(addr string, port int) error {
	if net.ParseIP(addr) == nil {
		return fmt.Errorf("%w: bind address %q is not an IP address", ErrInvalidProxyConfig, addr)
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: port %d out of range 1-65535", ErrInvalidProxyConfig, port)
	}
	return nil
}
