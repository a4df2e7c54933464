package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the network filters we implement.
const (
	typeExtAuthz    = "type.googleapis.com/envoy.extensions.filters.network.ext_authz.v3.ExtAuthz"
	typeTCPProxy    = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	typeHCM         = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeTLSInspect  = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
	localAgentName  = "local_agent"
	defaultAuthzTTL = 5 * time.Second
)

// listenerConfig is a decoded, validated Listener: one filter chain, or
// (a terminating gateway's) several chosen by the TLS server name.
type listenerConfig struct {
	name  string
	addr  string // normalized ip:port
	chain *filterChain
	// byServerName, when set, replaces chain: each filter chain matched by
	// filter_chain_match.server_names (exact names), all with TLS, or
	// (passthrough) all without, exact or "*." wildcard names.
	byServerName map[string]*filterChain
	// passthrough: the chains relay the TLS bytes by the client hello's
	// server name without terminating (passthrough.go).
	passthrough bool
}

// chains returns every filter chain of the listener.
func (l *listenerConfig) chains() []*filterChain {
	if l.byServerName == nil {
		return []*filterChain{l.chain}
	}
	out := make([]*filterChain, 0, len(l.byServerName))
	for _, c := range l.byServerName {
		out = append(out, c)
	}
	return out
}

// filterChain is one filter chain of a listener.
type filterChain struct {
	tls   *downstreamTLS // nil: plaintext
	authz *authzConfig   // nil: no ext_authz filter
	tcp   *tcpProxyConfig
	http  *httpConfig
}

// authzConfig is a decoded ext_authz network filter.
type authzConfig struct {
	statPrefix       string
	failureModeAllow bool
	timeout          time.Duration
}

// weightedCluster is one target of a tcp_proxy or a route.
type weightedCluster struct {
	name   string
	weight uint32
	// A route's weighted cluster may add or remove headers (applied
	// before the route's own); nil when it does not.
	hdrs *clusterHeaders
}

type clusterHeaders struct {
	req, resp headerMutation
}

type tcpProxyConfig struct {
	statPrefix string
	clusters   []weightedCluster
	// idleTimeout closes a relay that moved no byte either way for this
	// long (idle_timeout: Envoy's default 1 h; 0 none).
	idleTimeout time.Duration
}

// httpConfig is a decoded HttpConnectionManager: routes inline or by RDS.
type httpConfig struct {
	statPrefix string
	rdsName    string
	routes     *routeConfig
	authz      *httpAuthzConfig // nil: no HTTP ext_authz filter
	norm       pathNorm         // request path normalization
	upgrades   upgradeRules     // upgrade_configs: the upgrades relayed
}

// secretNames returns the SDS secrets the listener needs.
func (l *listenerConfig) secretNames() []string {
	var out []string
	for _, c := range l.chains() {
		if c.tls != nil {
			out = append(out, c.tls.secretNames()...)
		}
	}
	return out
}

// clusterNames returns the clusters the listener's filters name directly
// (tcp_proxy) or through an inline route configuration.
func (l *listenerConfig) clusterNames() []string {
	var out []string
	for _, ch := range l.chains() {
		if t := ch.tcp; t != nil {
			for _, c := range t.clusters {
				out = append(out, c.name)
			}
		}
		if h := ch.http; h != nil && h.routes != nil {
			out = append(out, h.routes.clusterNames()...)
		}
	}
	return out
}

// rdsNames returns the RDS route configurations the listener's chains use.
func (l *listenerConfig) rdsNames() []string {
	var out []string
	for _, ch := range l.chains() {
		if h := ch.http; h != nil && h.rdsName != "" {
			out = append(out, h.rdsName)
		}
	}
	return out
}

func decodeListener(l *listenerv3.Listener) (*listenerConfig, error) {
	if l.GetName() == "" {
		return nil, errors.New("listener has no name")
	}
	wrap := func(err error) error { return fmt.Errorf("listener %q: %w", l.GetName(), err) }
	addr, err := decodeSocketAddress(l.GetAddress())
	if err != nil {
		return nil, wrap(err)
	}
	switch {
	case l.GetApiListener() != nil:
		return nil, wrap(errors.New("api_listener is not supported"))
	case l.GetUseOriginalDst().GetValue():
		return nil, wrap(errors.New("use_original_dst (transparent proxy) is not supported"))
	case len(l.GetAdditionalAddresses()) > 0:
		return nil, wrap(errors.New("additional_addresses is not supported"))
	}
	for i, lf := range l.GetListenerFilters() {
		// The TLS inspector only feeds filter chain matching, which a
		// single-chain listener does not need.
		if lf.GetTypedConfig().GetTypeUrl() != typeTLSInspect && lf.GetName() != "envoy.filters.listener.tls_inspector" {
			return nil, wrap(fmt.Errorf("listener_filters[%d] %q is not supported", i, lf.GetName()))
		}
	}
	if sni, pass, err := decodeServerNameChains(l); err != nil || sni != nil {
		if err != nil {
			return nil, wrap(err)
		}
		return &listenerConfig{name: l.GetName(), addr: addr, byServerName: sni, passthrough: pass}, nil
	}
	var chains []*listenerv3.FilterChain
	for i, fc := range l.GetFilterChains() {
		if m := fc.GetFilterChainMatch(); m != nil && !proto.Equal(m, &listenerv3.FilterChainMatch{}) {
			return nil, wrap(fmt.Errorf("filter_chains[%d]: filter_chain_match is not supported", i))
		}
		chains = append(chains, fc)
	}
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(chains, dc)
	}
	if len(chains) != 1 {
		return nil, wrap(fmt.Errorf("want exactly one filter chain, have %d", len(chains)))
	}
	chain, err := decodeFilterChain(chains[0])
	if err != nil {
		return nil, wrap(err)
	}
	return &listenerConfig{name: l.GetName(), addr: addr, chain: chain}, nil
}

func decodeSocketAddress(a *corev3.Address) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", errors.New("address: only socket_address is supported")
	}
	if sa.GetProtocol() != corev3.SocketAddress_TCP {
		return "", fmt.Errorf("address: protocol %s is not supported", sa.GetProtocol())
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return "", fmt.Errorf("address: %q is not an IP address", sa.GetAddress())
	}
	pv, ok := sa.GetPortSpecifier().(*corev3.SocketAddress_PortValue)
	if !ok || pv.PortValue > 65535 {
		return "", errors.New("address: port_value between 0 and 65535 is required")
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(pv.PortValue))), nil
}

func decodeFilterChain(fc *listenerv3.FilterChain) (*filterChain, error) {
	out := &filterChain{}
	var err error
	if out.tls, err = decodeDownstreamTLS(fc.GetTransportSocket()); err != nil {
		return nil, err
	}
	filters := fc.GetFilters()
	if len(filters) == 0 {
		return nil, errors.New("filter chain has no filters")
	}
	for i, f := range filters {
		last := i == len(filters)-1
		typed := f.GetTypedConfig()
		if typed == nil {
			return nil, fmt.Errorf("filter %q has no typed_config", f.GetName())
		}
		switch typed.GetTypeUrl() {
		case typeExtAuthz:
			if last || out.authz != nil {
				return nil, errors.New("ext_authz must appear once, before the terminal filter")
			}
			if out.authz, err = decodeExtAuthz(typed); err != nil {
				return nil, err
			}
		case typeTCPProxy:
			if !last {
				return nil, errors.New("tcp_proxy must be the last filter")
			}
			if out.tcp, err = decodeTCPProxy(typed); err != nil {
				return nil, err
			}
		case typeHCM:
			if !last {
				return nil, errors.New("http_connection_manager must be the last filter")
			}
			if out.http, err = decodeHCM(typed); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("filter %q: type %s is not supported", f.GetName(), typed.GetTypeUrl())
		}
	}
	if out.tcp == nil && out.http == nil {
		return nil, errors.New("filter chain does not end with tcp_proxy or http_connection_manager")
	}
	return out, nil
}

func decodeExtAuthz(typed *anypb.Any) (*authzConfig, error) {
	var m extauthzv3.ExtAuthz
	if err := unmarshalAny(typed, &m); err != nil {
		return nil, fmt.Errorf("ext_authz: %w", err)
	}
	gs := m.GetGrpcService()
	eg := gs.GetEnvoyGrpc()
	if eg == nil {
		return nil, errors.New("ext_authz: grpc_service.envoy_grpc is required")
	}
	if eg.GetClusterName() != localAgentName {
		return nil, fmt.Errorf("ext_authz: cluster %q is not supported (want %q, the control plane)", eg.GetClusterName(), localAgentName)
	}
	out := &authzConfig{statPrefix: m.GetStatPrefix(), failureModeAllow: m.GetFailureModeAllow(), timeout: defaultAuthzTTL}
	if out.statPrefix == "" {
		out.statPrefix = "ext_authz"
	}
	if t := gs.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 {
			return nil, errors.New("ext_authz: grpc_service.timeout must be positive")
		}
		out.timeout = t.AsDuration()
	}
	return out, nil
}

func decodeTCPProxy(typed *anypb.Any) (*tcpProxyConfig, error) {
	var m tcpproxyv3.TcpProxy
	if err := unmarshalAny(typed, &m); err != nil {
		return nil, fmt.Errorf("tcp_proxy: %w", err)
	}
	out := &tcpProxyConfig{statPrefix: m.GetStatPrefix(), idleTimeout: defaultTCPIdleTimeout}
	if out.statPrefix == "" {
		return nil, errors.New("tcp_proxy: stat_prefix is required")
	}
	if d := m.GetIdleTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, errors.New("tcp_proxy: idle_timeout must not be negative")
		}
		out.idleTimeout = d.AsDuration()
	}
	switch cs := m.GetClusterSpecifier().(type) {
	case *tcpproxyv3.TcpProxy_Cluster:
		if cs.Cluster == "" {
			return nil, errors.New("tcp_proxy: cluster is empty")
		}
		out.clusters = []weightedCluster{{name: cs.Cluster, weight: 1}}
	case *tcpproxyv3.TcpProxy_WeightedClusters:
		for _, c := range cs.WeightedClusters.GetClusters() {
			if c.GetName() == "" {
				return nil, errors.New("tcp_proxy: weighted cluster has no name")
			}
			if c.GetWeight() > 0 {
				out.clusters = append(out.clusters, weightedCluster{name: c.GetName(), weight: c.GetWeight()})
			}
		}
		if len(out.clusters) == 0 {
			return nil, errors.New("tcp_proxy: weighted_clusters has no cluster with a positive weight")
		}
	default:
		return nil, errors.New("tcp_proxy: cluster or weighted_clusters is required")
	}
	return out, nil
}

// unmarshalAny unpacks a into m after checking the type.
func unmarshalAny(a *anypb.Any, m proto.Message) error {
	if err := a.UnmarshalTo(m); err != nil {
		return fmt.Errorf("failed to unpack %s: %w", a.GetTypeUrl(), err)
	}
	return nil
}

// hcmRouter is the terminal HTTP filter every HCM must end with.
const (
	routerFilterName = "envoy.filters.http.router"
	typeRouter       = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
)

func decodeHCM(typed *anypb.Any) (*httpConfig, error) {
	var m hcmv3.HttpConnectionManager
	if err := unmarshalAny(typed, &m); err != nil {
		return nil, fmt.Errorf("http_connection_manager: %w", err)
	}
	out := &httpConfig{statPrefix: m.GetStatPrefix()}
	if out.statPrefix == "" {
		return nil, errors.New("http_connection_manager: stat_prefix is required")
	}
	var err error
	if out.norm, err = decodePathNorm(&m); err != nil {
		return nil, err
	}
	if out.upgrades, err = decodeHCMUpgrades(m.GetUpgradeConfigs()); err != nil {
		return nil, fmt.Errorf("http_connection_manager: %w", err)
	}
	hf := m.GetHttpFilters()
	if len(hf) == 0 {
		return nil, errors.New("http_connection_manager: http_filters must end with the router")
	}
	for i, f := range hf {
		isRouter := f.GetTypedConfig().GetTypeUrl() == typeRouter || (f.GetTypedConfig() == nil && f.GetName() == routerFilterName)
		switch {
		case i == len(hf)-1 && !isRouter:
			return nil, errors.New("http_connection_manager: http_filters must end with the router")
		case i < len(hf)-1 && f.GetTypedConfig().GetTypeUrl() == typeHTTPExtAuthz:
			if out.authz != nil {
				return nil, errors.New("http_connection_manager: ext_authz appears twice")
			}
			if out.authz, err = decodeHTTPExtAuthz(f.GetTypedConfig()); err != nil {
				return nil, fmt.Errorf("http_connection_manager: %w", err)
			}
		case i < len(hf)-1 && !f.GetIsOptional():
			return nil, fmt.Errorf("http_connection_manager: http filter %q is not supported", f.GetName())
		}
	}
	switch rs := m.GetRouteSpecifier().(type) {
	case *hcmv3.HttpConnectionManager_Rds:
		if rs.Rds.GetRouteConfigName() == "" {
			return nil, errors.New("http_connection_manager: rds.route_config_name is required")
		}
		if err := checkConfigSource(rs.Rds.GetConfigSource()); err != nil {
			return nil, fmt.Errorf("http_connection_manager: rds: %w", err)
		}
		out.rdsName = rs.Rds.GetRouteConfigName()
	case *hcmv3.HttpConnectionManager_RouteConfig:
		rc, err := decodeRouteConfig(rs.RouteConfig)
		if err != nil {
			return nil, fmt.Errorf("http_connection_manager: route_config: %w", err)
		}
		out.routes = rc
	default:
		return nil, errors.New("http_connection_manager: rds or route_config is required")
	}
	return out, nil
}

// decodeServerNameChains decodes a listener whose filter chains are all
// matched by server_names alone: a terminating gateway's (one chain per
// linked service, by the SNI mesh clients send), each terminating TLS, or
// a mesh gateway's, each passing TLS through (passthrough is true). It
// returns nil when no chain has a server_names match.
func decodeServerNameChains(l *listenerv3.Listener) (map[string]*filterChain, bool, error) {
	fcs := l.GetFilterChains()
	if !slices.ContainsFunc(fcs, func(fc *listenerv3.FilterChain) bool { return len(fc.GetFilterChainMatch().GetServerNames()) > 0 }) {
		return nil, false, nil
	}
	if l.GetDefaultFilterChain() != nil {
		return nil, false, errors.New("default_filter_chain next to server_names matches is not supported")
	}
	chains := make([]*filterChain, len(fcs))
	for i, fc := range fcs {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) == 0 || !proto.Equal(m, &listenerv3.FilterChainMatch{ServerNames: m.GetServerNames()}) {
			return nil, false, fmt.Errorf("filter_chains[%d]: only server_names matches are supported next to one another", i)
		}
		chain, err := decodeFilterChain(fc)
		if err != nil {
			return nil, false, fmt.Errorf("filter_chains[%d]: %w", i, err)
		}
		chains[i] = chain
	}
	pass, err := checkPassthroughChains(fcs, chains)
	if err != nil {
		return nil, false, err
	}
	out := map[string]*filterChain{}
	for i, fc := range fcs {
		for _, n := range fc.GetFilterChainMatch().GetServerNames() {
			k := strings.ToLower(n)
			if out[k] != nil {
				return nil, false, fmt.Errorf("filter_chains[%d]: server name %q is matched twice", i, n)
			}
			out[k] = chains[i]
		}
	}
	return out, pass, nil
}
