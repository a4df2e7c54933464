package xds

import (
	"fmt"
	"maps"
	"net"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

const tlsInspectorFilter = "envoy.filters.listener.tls_inspector"

// TerminatingListenerName names a terminating gateway's default listener
// as Consul does: "default:<addr>:<port>".
func TerminatingListenerName(port int) string {
	return GatewayListenerName("default", publicBindAddr, port)
}

// GatewayListenerName names a terminating (or mesh) gateway's listener on
// one of its binds as Consul does: "<bind name>:<addr>:<port>".
func GatewayListenerName(bind, addr string, port int) string {
	return bind + ":" + net.JoinHostPort(addr, strconv.Itoa(port))
}

// terminatingGateway builds a terminating gateway's resources from the
// terminating-gateway config entry of its name (none: no listener yet):
// one listener on the gateway's port with a filter chain per linked
// service, chosen by the SNI mesh clients send (the service's cluster
// name). Each chain terminates mTLS with the linked service's leaf, so
// that ext_authz judges intentions with that service as the destination,
// then proxies to a cluster of the service's catalog instances (the ones
// outside the mesh), originating TLS when the entry asks for it.
func (b builder) terminatingGateway(inst catalog.ServiceInstance) (*proxyResources, error) {
	out := &proxyResources{service: inst.Name, specs: map[claKey]endpointSpec{}}
	e, _ := b.entries().Get(configentry.TerminatingGateway, inst.Name).(*consul.TerminatingGatewayConfigEntry)
	if e == nil || len(e.Services) == 0 {
		return out, nil
	}
	binds, err := GatewayBinds(inst, publicBindAddr)
	if err != nil {
		return nil, err
	}
	if err := checkBindConflicts(binds, func(b GatewayBind) []int { return []int{b.Port} }); err != nil {
		return nil, fmt.Errorf("terminating gateway listener: %w", err)
	}
	cfg := proxyConfig(inst)
	timeout, err := parseTimeoutMS(cfg, cfgConnectTimeout, defaultConnectTimeout)
	if err != nil {
		return nil, err
	}
	inspector, err := anyOf(&tlsinspector.TlsInspector{})
	if err != nil {
		return nil, err
	}
	dnsType, err := parseDNSDiscoveryType(cfg)
	if err != nil {
		return nil, err
	}
	var chains []*listener.FilterChain
	for _, ls := range e.Services {
		fcs, cs, err := b.linkedService(ls, timeout, dnsType)
		if err != nil {
			return nil, fmt.Errorf("terminating gateway %q, service %q: %w", inst.Name, ls.Name, err)
		}
		chains = append(chains, fcs...)
		out.clusters = append(out.clusters, cs...)
		out.linked = append(out.linked, ls.Name)
	}
	for i, bind := range binds {
		if i > 0 { // each listener owns its chains
			chains = cloneChains(chains)
		}
		out.listeners = append(out.listeners, &listener.Listener{
			Name:             GatewayListenerName(bind.Name, bind.Address, bind.Port),
			Address:          socketAddress(bind.Address, bind.Port),
			TrafficDirection: core.TrafficDirection_INBOUND,
			ListenerFilters: []*listener.ListenerFilter{{
				Name: tlsInspectorFilter, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: inspector},
			}},
			FilterChains: chains,
		})
	}
	return out, nil
}

// linkedService is the filter chain and cluster of one linked service,
// then those of each of its resolver subsets: a mesh client that targets
// a subset sends the subset's SNI (<subset>.<svc>.default.<dc>...), and
// Consul's terminating gateways route it to the instances in the subset.
// An HTTP service's route (each subset's too) carries its resolver's
// RequestTimeout and, for ring_hash or maglev, its hash policies, as
// Consul's terminating gateway routes do (its routers play no part).
func (b builder) linkedService(ls consul.LinkedService, timeoutMS int, dnsType cluster.Cluster_DiscoveryType) ([]*listener.FilterChain, []*cluster.Cluster, error) {
	prot, err := b.serviceProtocol(nil, ls.Name)
	if err != nil {
		return nil, nil, err
	}
	if !prot.isHTTP() {
		prot = protoTCP
	}
	subsets := map[string]consul.ServiceResolverSubset{"": {}}
	r, _ := b.entries().Get(configentry.ServiceResolver, ls.Name).(*consul.ServiceResolverConfigEntry)
	if r != nil {
		maps.Copy(subsets, r.Subsets)
	}
	var rt inboundRoute
	if r != nil {
		if r.RequestTimeout > 0 {
			rt.timeout = durationpb.New(r.RequestTimeout)
		}
		rt.hash = hashPolicies(r.LoadBalancer)
	}
	var chains []*listener.FilterChain
	var clusters []*cluster.Cluster
	for _, name := range sortedKeys(subsets) { // "" (the service) first
		sub := subsets[name]
		sni := subsetClusterName(name, ls.Name, b.dc, b.trustDomain)
		fc, err := publicChain(ls.Name, prot, rt, sni)
		if err != nil {
			return nil, nil, err
		}
		fc.Name = sni
		fc.FilterChainMatch = &listener.FilterChainMatch{ServerNames: []string{sni}}
		c, err := b.externalCluster(sni, ls, timeoutMS, dnsType, sub)
		if err != nil {
			return nil, nil, err
		}
		if err := gatewayResolverSettings(c, r, true); err != nil {
			return nil, nil, err
		}
		if prot.isHTTP2() { // gRPC needs HTTP/2 to the service too
			if c.TypedExtensionProtocolOptions, err = http2Options(); err != nil {
				return nil, nil, err
			}
		}
		chains, clusters = append(chains, fc), append(clusters, c)
	}
	return chains, clusters, nil
}

// externalCluster is a STATIC cluster of a linked service's healthy
// instances that run no proxy (its instances outside the mesh) and pass
// the subset's filter (the zero subset: all), with
// upstream TLS from the entry's CAFile, CertFile, KeyFile and SNI. When
// they are only registered by hostname, it is a DNS cluster of dnsType
// (envoy_dns_discovery_type), as Consul builds it.
func (b builder) externalCluster(name string, ls consul.LinkedService, timeoutMS int, dnsType cluster.Cluster_DiscoveryType, sub consul.ServiceResolverSubset) (*cluster.Cluster, error) {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	var eps, hostEPs []*endpoint.LbEndpoint
	seen := map[string]bool{}
	if b.instances != nil {
		for _, inst := range b.instances(ls.Name) {
			key := net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port))
			if inst.Kind != "" || !inst.Healthy || inst.Port <= 0 || inst.Port > 65535 || seen[key] {
				continue
			}
			if inst.Datacenter != "" && inst.Datacenter != b.dc {
				continue
			}
			if sub.OnlyPassing && hasWarning(inst) {
				continue
			}
			if ok, err := configentry.MatchFilter(sub.Filter, inst); err != nil || !ok {
				continue // the filter was checked when the resolver was written
			}
			seen[key] = true
			if net.ParseIP(inst.Address) != nil {
				eps = append(eps, lbEndpoint(inst.Address, inst.Port))
			} else if validHostname(inst.Address) {
				hostEPs = append(hostEPs, lbEndpoint(inst.Address, inst.Port)) // Envoy resolves a host name by DNS
			}
		}
	}
	typ := cluster.Cluster_STATIC
	if len(eps) == 0 && len(hostEPs) > 0 {
		typ, eps = dnsType, hostEPs
		if typ == cluster.Cluster_LOGICAL_DNS {
			eps = eps[:1] // Envoy takes one host for a LOGICAL_DNS cluster
		}
	}
	if len(eps) > 0 {
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: eps}}
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: typ},
		ConnectTimeout:       msDuration(timeoutMS),
		LoadAssignment:       cla,
	}
	if ls.CAFile == "" {
		return c, nil
	}
	sock, err := tlsSocket(originationTLS(ls))
	if err != nil {
		return nil, err
	}
	c.TransportSocket = sock
	return c, nil
}

// originationTLS is the upstream TLS a terminating gateway originates to a
// linked service: its CA to verify the server, an optional client
// certificate, and the SNI to send, which the server's certificate must
// also carry as a DNS SAN (as Consul checks it), so that any other
// certificate of the same CA is refused.
func originationTLS(ls consul.LinkedService) *tlsv3.UpstreamTlsContext {
	vc := &tlsv3.CertificateValidationContext{TrustedCa: fileSource(ls.CAFile)}
	if ls.SNI != "" {
		vc.MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
			SanType: tlsv3.SubjectAltNameMatcher_DNS,
			Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: ls.SNI}},
		}}
	}
	ctx := &tlsv3.UpstreamTlsContext{
		Sni: ls.SNI,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
		},
	}
	if ls.CertFile != "" && ls.KeyFile != "" {
		ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: fileSource(ls.CertFile),
			PrivateKey:       fileSource(ls.KeyFile),
		}}
	}
	return ctx
}

func fileSource(path string) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: path}}
}

// touchLinked extends a change to terminating gateways: a linked service's
// instances changed, so the local gateways linked to it are rebuilt (their
// clusters hold its endpoints); a gateway's instances changed, so the
// load assignments of its linked services (which are its instances) are.
func (s *Server) touchLinked(ch changes, linked map[string][]string) {
	if len(linked) == 0 {
		return
	}
	byGateway := map[string][]string{}
	for svc, gws := range linked {
		for _, gw := range gws {
			byGateway[gw] = append(byGateway[gw], svc)
		}
	}
	var extra []string
	for svc := range ch.services {
		for _, gw := range linked[svc] {
			for _, inst := range s.cfg.Catalog.Service(gw) {
				if inst.Kind == catalog.KindTerminatingGateway && s.isLocal(inst) {
					ch.proxies[inst.ID] = struct{}{}
				}
			}
		}
		extra = append(extra, byGateway[svc]...)
	}
	for _, svc := range extra {
		ch.services[svc] = struct{}{}
	}
}

// gatewayInstances are the instances of the terminating gateways linked to
// service in dc: a mesh upstream's endpoints for a service outside the
// mesh (the gateway presents the service's leaf).
func gatewayInstances(c *catalog.Catalog, gateways []string, dc, localDC string) []catalog.ServiceInstance {
	var out []catalog.ServiceInstance
	for _, gw := range gateways {
		for _, inst := range c.Service(gw) {
			if inst.Kind == catalog.KindTerminatingGateway && (inst.Datacenter == dc || (inst.Datacenter == "" && dc == localDC)) {
				out = append(out, inst)
			}
		}
	}
	return out
}
