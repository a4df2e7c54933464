package configentry

import consul "github.com/hashicorp/consul/api"

// Authorizer is what judging access to a config entry asks of a token's
// ACL (*acl.ACL implements it).
type Authorizer interface {
	IsManagement() bool
	AllowMeshRead() bool
	AllowMeshWrite() bool
	AllowServiceRead(name string) bool
	AllowServiceWrite(name string) bool
	AllowIntentionRead(dest string) bool
	AllowIntentionWrite(dest string) bool
}

// Allowed is Consul's rule for config entries: the service kinds need
// service read or write on the entry's name, service-intentions intention
// read or write, proxy-defaults and mesh mesh read or write,
// ingress-gateway and terminating-gateway service read or mesh write; any other
// kind a management token. Both the connect API and the servers' RPC
// port (a client agent's forwarded write) judge with it.
func Allowed(a Authorizer, kind, name string, write bool) bool {
	switch kind {
	case consul.ServiceDefaults, consul.ServiceRouter, consul.ServiceSplitter, consul.ServiceResolver:
		if write {
			return a.AllowServiceWrite(name)
		}
		return a.AllowServiceRead(name)
	case consul.ServiceIntentions:
		if write {
			return a.AllowIntentionWrite(name)
		}
		return a.AllowIntentionRead(name)
	case consul.IngressGateway, consul.TerminatingGateway:
		// Consul: service read on the gateway, operator write (mesh write
		// here) to change it.
		if write {
			return a.AllowMeshWrite()
		}
		return a.AllowServiceRead(name)
	case consul.ProxyDefaults, consul.MeshConfig:
		if write {
			return a.AllowMeshWrite()
		}
		return a.AllowMeshRead()
	}
	return a.IsManagement()
}

// WriteAllowed is Allowed for writing entry e, plus Consul's rule for the
// discovery chain (canWriteDiscoveryChain): a service-router, -splitter
// or -resolver also needs service read on every other service it sends
// traffic to, so write on one's own service cannot route it to services
// the writer may not even read.
func WriteAllowed(a Authorizer, e consul.ConfigEntry) bool {
	if !Allowed(a, e.GetKind(), e.GetName(), true) {
		return false
	}
	for _, svc := range relatedServices(e) {
		if svc != e.GetName() && !a.AllowServiceRead(svc) {
			return false
		}
	}
	return true
}

// relatedServices are the services a discovery-chain entry names as
// destinations (Consul's ListRelatedServices).
func relatedServices(e consul.ConfigEntry) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	switch e := e.(type) {
	case *consul.ServiceRouterConfigEntry:
		for _, r := range e.Routes {
			if r.Destination != nil {
				add(r.Destination.Service)
			}
		}
	case *consul.ServiceSplitterConfigEntry:
		for _, s := range e.Splits {
			add(s.Service)
		}
	case *consul.ServiceResolverConfigEntry:
		if e.Redirect != nil {
			add(e.Redirect.Service)
		}
		for _, f := range e.Failover {
			add(f.Service)
			for _, t := range f.Targets {
				add(t.Service)
			}
		}
	}
	return out
}
