package xds

import (
	"fmt"
	"strconv"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/configentry"
)

// IngressServiceRouteName is the RDS name of one service's routes on an
// ingress listener whose certificate for that service comes from its own
// SDS resource: "<port>_<service>", as Consul names it.
func IngressServiceRouteName(port int, service string) string {
	return strconv.Itoa(port) + "_" + service
}

// withServiceSDS adds, for every service of an http-like listener with its
// own tls { sds }, a filter chain chosen by SNI (the service's hosts) that
// serves that service's certificate and only its routes, before the
// listener's default chain, as Consul builds them; the tls_inspector reads
// the SNI. The service's SDS cluster defaults to the listener's.
func withServiceSDS(lst *listener.Listener, gateway, addr string, gw consul.GatewayTLSConfig, l consul.IngressListener,
	out *proxyResources, routes map[string]*route.RouteConfiguration) error {
	lt := configentry.ResolveIngressTLS(gw, l.TLS)
	var chains []*listener.FilterChain
	for _, s := range l.Services {
		if s.TLS == nil || s.TLS.SDS == nil {
			continue
		}
		sds := *s.TLS.SDS
		if sds.ClusterName == "" && lt != nil && lt.SDS != nil {
			sds.ClusterName = lt.SDS.ClusterName
		}
		if sds.ClusterName == "" || sds.CertResource == "" || len(s.Hosts) == 0 {
			return fmt.Errorf("%w: ingress listener on port %d, service %q: SDS needs a cluster, a certificate resource and hosts", ErrInvalidProxyConfig, l.Port, s.Name)
		}
		svcTLS := consul.GatewayTLSConfig{Enabled: true, SDS: &sds}
		if lt != nil {
			svcTLS.TLSMinVersion, svcTLS.TLSMaxVersion, svcTLS.CipherSuites = lt.TLSMinVersion, lt.TLSMaxVersion, lt.CipherSuites
		}
		fc, err := serviceSDSChain(gateway, addr, s, svcTLS, l, out, routes)
		if err != nil {
			return err
		}
		chains = append(chains, fc)
	}
	if len(chains) == 0 {
		return nil
	}
	inspector, err := anyOf(&tlsinspector.TlsInspector{})
	if err != nil {
		return err
	}
	lst.ListenerFilters = []*listener.ListenerFilter{{Name: tlsInspectorFilter, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: inspector}}}
	lst.FilterChains = append(chains, lst.FilterChains...)
	return nil
}

// serviceSDSChain is one service's SNI filter chain and its own routes.
func serviceSDSChain(gateway, addr string, s consul.IngressService, t consul.GatewayTLSConfig, l consul.IngressListener,
	out *proxyResources, routes map[string]*route.RouteConfiguration) (*listener.FilterChain, error) {
	all := routes[IngressRouteName(l.Port)]
	rn := IngressServiceRouteName(l.Port, s.Name)
	if _, ok := routes[rn]; !ok {
		rc := &route.RouteConfiguration{Name: rn}
		for _, vh := range all.GetVirtualHosts() {
			if vh.GetName() == s.Name {
				rc.VirtualHosts = append(rc.VirtualHosts, proto.Clone(vh).(*route.VirtualHost))
			}
		}
		routes[rn] = rc
		out.routes = append(out.routes, rc)
	}
	sl, err := rdsListener("ingress_upstream_"+rn, addr, l.Port, rn)
	if err != nil {
		return nil, err
	}
	fc := sl.GetFilterChains()[0]
	fc.FilterChainMatch = &listener.FilterChainMatch{}
	for _, h := range s.Hosts {
		fc.FilterChainMatch.ServerNames = append(fc.FilterChainMatch.ServerNames, hostOnly(h))
	}
	if fc.TransportSocket, err = ingressTLSSocket(gateway, &t, ingressALPN(l.Protocol)); err != nil {
		return nil, err
	}
	return fc, nil
}
