package xds

import (
	"slices"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// IngressWildcard is the service name that stands for every mesh service
// of the listener's protocol (Consul's "*").
const IngressWildcard = "*"

// meshServices lists the services of a datacenter that have a connect
// sidecar in the catalog, sorted (a wildcard ingress listener's
// candidates; gateways have none, so they are left out).
func meshServices(c *catalog.Catalog, dc string) []string {
	var out []string
	for _, inst := range c.Proxies() {
		if inst.Kind != catalog.KindConnectProxy || inst.Proxy == nil || (inst.Datacenter != "" && inst.Datacenter != dc) {
			continue
		}
		if n := inst.Proxy.DestinationServiceName; n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// expandWildcard replaces a "*" service of an http listener with every
// mesh service whose protocol is the listener's (service-defaults or
// proxy-defaults), after the services it names itself, as Consul does;
// each is routed by its default host "<service>.ingress.*".
func (b builder) expandWildcard(l consul.IngressListener, prot protocol) []consul.IngressService {
	var out []consul.IngressService
	wildcard := false
	for _, s := range l.Services {
		if s.Name == IngressWildcard {
			wildcard = true
			continue
		}
		out = append(out, s)
	}
	if !wildcard || b.meshServices == nil {
		return out
	}
	for _, name := range b.meshServices() {
		if slices.ContainsFunc(out, func(s consul.IngressService) bool { return s.Name == name }) {
			continue
		}
		if p, err := b.serviceProtocol(nil, name); err == nil && p == prot {
			out = append(out, consul.IngressService{Name: name})
		}
	}
	return out
}

// hasIngressWildcard reports whether an ingress-gateway entry routes "*".
func hasIngressWildcard(e configentry.Entry) bool {
	ig, ok := e.(*consul.IngressGatewayConfigEntry)
	if !ok {
		return false
	}
	for _, l := range ig.Listeners {
		for _, s := range l.Services {
			if s.Name == IngressWildcard {
				return true
			}
		}
	}
	return false
}

// touchWildcardIngress rebuilds the local ingress gateways with a "*"
// service when any service changed: a service came or went, or its
// protocol may have changed with the entries (rebuilt anyway then).
func (s *Server) touchWildcardIngress(ch changes, set *configentry.Set) {
	if len(ch.services) == 0 || set == nil {
		return
	}
	for _, e := range set.List(configentry.IngressGateway) {
		if !hasIngressWildcard(e) {
			continue
		}
		for _, inst := range s.cfg.Catalog.Service(e.GetName()) {
			if inst.Kind == catalog.KindIngressGateway && s.isLocal(inst) {
				ch.proxies[inst.ID] = struct{}{}
			}
		}
	}
}
