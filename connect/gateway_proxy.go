package connect

import (
	"maps"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

// Proxy config keys a gateway's proxy block becomes (Consul's names, as
// Nomad writes them into the gateway's registration).
const (
	cfgConnectTimeoutMS           = "connect_timeout_ms"
	cfgGatewayBindTaggedAddresses = catalog.CfgGatewayBindTaggedAddresses
	cfgGatewayBindAddresses       = catalog.CfgGatewayBindAddresses
	cfgGatewayNoDefaultBind       = catalog.CfgGatewayNoDefaultBind
	cfgDNSDiscoveryType           = catalog.CfgDNSDiscoveryType
)

// GatewayProxyConfig is the proxy config of a gateway's registration, as
// Nomad builds it from the proxy block: its config {} map, then
// connect_timeout_ms and the bind and DNS options (which win over the
// same keys in config). nil when there is nothing to set.
func GatewayProxyConfig(gp *structs.ConsulGatewayProxy) map[string]any {
	if gp == nil {
		return nil
	}
	m := maps.Clone(gp.Config)
	if m == nil {
		m = map[string]any{}
	}
	if gp.ConnectTimeout != nil {
		m[cfgConnectTimeoutMS] = int(*gp.ConnectTimeout / time.Millisecond)
	}
	if gp.EnvoyGatewayBindTaggedAddresses {
		m[cfgGatewayBindTaggedAddresses] = true
	}
	if gp.EnvoyGatewayNoDefaultBind {
		m[cfgGatewayNoDefaultBind] = true
	}
	if gp.EnvoyDNSDiscoveryType != "" {
		m[cfgDNSDiscoveryType] = gp.EnvoyDNSDiscoveryType
	}
	if len(gp.EnvoyGatewayBindAddresses) > 0 {
		binds := map[string]any{}
		for name, a := range gp.EnvoyGatewayBindAddresses {
			if a != nil {
				binds[name] = map[string]any{"address": a.Address, "port": a.Port}
			}
		}
		m[cfgGatewayBindAddresses] = binds
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
