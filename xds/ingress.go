package xds

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// ingressBindAddr is where an ingress gateway's listeners bind: every
// address of the allocation's namespace (of the host in host mode).
const ingressBindAddr = "0.0.0.0"

// IngressListenerName names an ingress gateway's listener as Consul does:
// "<protocol>:<addr>:<port>".
func IngressListenerName(prot, addr string, port int) string {
	return prot + ":" + net.JoinHostPort(addr, strconv.Itoa(port))
}

// IngressRouteName is the RDS name of an http ingress listener's routes:
// its port, as Consul names them.
func IngressRouteName(port int) string { return strconv.Itoa(port) }

// IngressDomains are the Host header values an http ingress listener
// routes to a service: its hosts (each also with ":<port>"), else
// "<service>.ingress.*" and "<service>.ingress.*:<port>".
func IngressDomains(service string, hosts []string, port int) []string {
	p := ":" + strconv.Itoa(port)
	if len(hosts) == 0 {
		return []string{service + ".ingress.*", service + ".ingress.*" + p}
	}
	var out []string
	seen := map[string]bool{}
	add := func(d string) { // Envoy refuses a route configuration with a domain twice
		if k := strings.ToLower(d); !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	for _, h := range hosts {
		add(h)
		if h != "*" && !strings.Contains(h, ":") {
			add(h + p)
		}
	}
	return out
}

// ingressGateway builds an ingress gateway's resources from the
// ingress-gateway config entry of its name (none: no listener yet). Each
// service is an upstream of the gateway's own identity: mTLS with the
// gateway's leaf to the service's sidecars, through its discovery chain.
func (b builder) ingressGateway(inst catalog.ServiceInstance) (*proxyResources, error) {
	out := &proxyResources{service: inst.Name, specs: map[claKey]endpointSpec{}, setsLeafDNS: true}
	e, _ := b.entries().Get(configentry.IngressGateway, inst.Name).(*consul.IngressGatewayConfigEntry)
	if e == nil {
		return out, nil
	}
	cfg := proxyConfig(inst)
	timeout, err := parseTimeoutMS(cfg, cfgConnectTimeout, defaultConnectTimeout)
	if err != nil {
		return nil, err
	}
	_, timeoutSet := cfg[cfgConnectTimeout]
	ut := upstreamTimeout{ms: timeout, set: timeoutSet}
	binds, err := GatewayBinds(inst, ingressBindAddr)
	if err != nil {
		return nil, err
	}
	if err := checkBindConflicts(binds, func(GatewayBind) []int { return ingressPorts(e) }); err != nil {
		return nil, fmt.Errorf("ingress listeners: %w", err)
	}
	clusters, routes := map[string]*cluster.Cluster{}, map[string]*route.RouteConfiguration{}
	for _, bind := range binds {
		for _, l := range e.Listeners {
			lst, err := b.ingressListener(inst.Name, bind.Address, l, ut, out, clusters, routes)
			if err != nil {
				return nil, err
			}
			if err := withIngressTLS(lst, inst.Name, e.TLS, l, ingressALPN(l.Protocol)); err != nil {
				return nil, fmt.Errorf("ingress listener on port %d: %w", l.Port, err)
			}
			if err := withServiceSDS(lst, inst.Name, bind.Address, e.TLS, l, out, routes); err != nil {
				return nil, err
			}
			out.listeners = append(out.listeners, lst)
		}
	}
	out.leafDNS = IngressDNSSANs(e, b.dc)
	return out, nil
}

// ingressALPN is what a TLS listener offers: h2 first for http2 and grpc
// listeners (HTTP/2 over TLS), nothing otherwise (Envoy's default).
func ingressALPN(prot string) []string {
	if protocol(orProtocol(prot)).isHTTP2() {
		return []string{"h2", "http/1.1"}
	}
	return nil
}

// ingressPorts are the ports of an entry's listeners.
func ingressPorts(e *consul.IngressGatewayConfigEntry) []int {
	out := make([]int, 0, len(e.Listeners))
	for _, l := range e.Listeners {
		out = append(out, l.Port)
	}
	return out
}

// ingressListener is one listener of the entry bound on addr.
func (b builder) ingressListener(own, addr string, l consul.IngressListener, ut upstreamTimeout, out *proxyResources,
	clusters map[string]*cluster.Cluster, routes map[string]*route.RouteConfiguration) (*listener.Listener, error) {
	switch prot := protocol(orProtocol(l.Protocol)); prot {
	case protoTCP:
		return b.ingressTCP(own, addr, l, ut, out, clusters, routes)
	case protoHTTP, protoHTTP2, protoGRPC:
		return b.ingressHTTP(own, addr, prot, l, ut, out, clusters, routes)
	default:
		return nil, fmt.Errorf("%w: ingress listener on port %d: protocol %q is not one of tcp, http, http2, grpc", ErrInvalidProxyConfig, l.Port, prot)
	}
}

func orProtocol(p string) string {
	if p == "" {
		return string(protoTCP)
	}
	return strings.ToLower(p)
}

func ingressUpstream(service, addr string, port int) catalog.Upstream {
	return catalog.Upstream{DestinationName: service, LocalBindAddress: addr, LocalBindPort: port}
}

// ingressTCP is a tcp listener: tcp_proxy to its one service's cluster.
func (b builder) ingressTCP(own, addr string, l consul.IngressListener, ut upstreamTimeout, out *proxyResources,
	clusters map[string]*cluster.Cluster, routes map[string]*route.RouteConfiguration) (*listener.Listener, error) {
	if len(l.Services) != 1 {
		return nil, fmt.Errorf("%w: tcp ingress listener on port %d needs exactly one service, has %d", ErrInvalidProxyConfig, l.Port, len(l.Services))
	}
	svc := l.Services[0].Name
	u, err := b.upstreamChain(own, ingressUpstream(svc, addr, l.Port), addr, b.dc, protoTCP, ut)
	if err != nil {
		return nil, err
	}
	if u.route != nil {
		return nil, fmt.Errorf("%w: tcp ingress listener on port %d: service %q routes by HTTP; use an http listener", ErrInvalidProxyConfig, l.Port, svc)
	}
	if err := out.merge(u, clusters, routes); err != nil {
		return nil, fmt.Errorf("%w: ingress listener on port %d: %w", ErrInvalidProxyConfig, l.Port, err)
	}
	u.listener.Name = IngressListenerName(string(protoTCP), addr, l.Port)
	return u.listener, nil
}

// ingressHTTP is an http listener: an HTTP connection manager over RDS
// whose route configuration has one virtual host per service, matched by
// Host header (IngressDomains), routing through the service's chain.
func (b builder) ingressHTTP(own, addr string, prot protocol, l consul.IngressListener, ut upstreamTimeout, out *proxyResources,
	clusters map[string]*cluster.Cluster, routes map[string]*route.RouteConfiguration) (*listener.Listener, error) {
	rn := IngressRouteName(l.Port)
	rc := &route.RouteConfiguration{Name: rn}
	for _, s := range b.expandWildcard(l, prot) {
		u, err := b.upstreamChain(own, ingressUpstream(s.Name, addr, l.Port), addr, b.dc, prot, ut)
		if err != nil {
			return nil, err
		}
		vh, err := serviceVirtualHost(u)
		if err != nil {
			return nil, fmt.Errorf("ingress listener on port %d, service %q: %w", l.Port, s.Name, err)
		}
		vh.Name, vh.Domains = s.Name, IngressDomains(s.Name, s.Hosts, l.Port)
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
		u.route = nil // its virtual host moved into rc
		if err := out.merge(u, clusters, routes); err != nil {
			return nil, fmt.Errorf("%w: ingress listener on port %d: %w", ErrInvalidProxyConfig, l.Port, err)
		}
	}
	if err := rc.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: routes of ingress listener on port %d: %w", ErrInvalidProxyConfig, l.Port, err)
	}
	if prev, ok := routes[rn]; !ok {
		routes[rn] = rc
		out.routes = append(out.routes, rc)
	} else if !proto.Equal(prev, rc) {
		return nil, fmt.Errorf("%w: routes of ingress listener on port %d differ between bind addresses", ErrInvalidProxyConfig, l.Port)
	}
	lst, err := rdsListener("ingress_upstream_"+rn, addr, l.Port, rn)
	if err != nil {
		return nil, err
	}
	lst.Name = IngressListenerName(string(prot), addr, l.Port)
	return lst, nil
}

// serviceVirtualHost is the virtual host of one upstream's routes: from
// its RDS route configuration (a chain with routes or splits), or from the
// inline route of its listener (the default chain).
func serviceVirtualHost(u *upstreamOut) (*route.VirtualHost, error) {
	if u.route != nil && len(u.route.GetVirtualHosts()) == 1 {
		return proto.Clone(u.route.GetVirtualHosts()[0]).(*route.VirtualHost), nil
	}
	for _, f := range u.listener.GetFilterChains()[0].GetFilters() {
		if f.GetName() != hcmFilter {
			continue
		}
		m, err := unpackHCM(f)
		if err != nil {
			return nil, err
		}
		if vhs := m.GetRouteConfig().GetVirtualHosts(); len(vhs) == 1 {
			return vhs[0], nil
		}
	}
	return nil, fmt.Errorf("%w: no single virtual host to route to", ErrInvalidChain)
}

func unpackHCM(f *listener.Filter) (*hcm.HttpConnectionManager, error) {
	m := &hcm.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("failed to unpack the HTTP connection manager: %w", err)
	}
	return m, nil
}
