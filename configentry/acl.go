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
