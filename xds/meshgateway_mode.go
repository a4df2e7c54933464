package xds

import (
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// Mesh gateway modes (Consul's MeshGatewayMode): how a sidecar reaches an
// upstream target in another datacenter. none (or unset): straight to the
// target's sidecars; local: through its own datacenter's mesh gateways;
// remote: through the target datacenter's gateways.
const (
	meshGatewayNone   = string(consul.MeshGatewayModeNone)
	meshGatewayLocal  = string(consul.MeshGatewayModeLocal)
	meshGatewayRemote = string(consul.MeshGatewayModeRemote)
)

// meshGatewayMode is the mode of own's upstream up, the first set of, as
// Consul resolves it: the upstream's own mesh_gateway block; own's
// service-defaults UpstreamConfig (the override naming the upstream, then
// the defaults); own's service-defaults MeshGateway; the destination's
// service-defaults MeshGateway; proxy-defaults' MeshGateway. "none" is a
// choice like the others (it stops the search); "" is none.
func (b builder) meshGatewayMode(own string, up catalog.Upstream) string {
	modes := []string{up.MeshGatewayMode}
	if sd := b.serviceDefaults(own); sd != nil {
		if uc := sd.UpstreamConfig; uc != nil {
			for _, o := range uc.Overrides {
				if o != nil && o.Name == up.DestinationName && o.Peer == "" {
					modes = append(modes, string(o.MeshGateway.Mode))
				}
			}
			if uc.Defaults != nil {
				modes = append(modes, string(uc.Defaults.MeshGateway.Mode))
			}
		}
		modes = append(modes, string(sd.MeshGateway.Mode))
	}
	if sd := b.serviceDefaults(up.DestinationName); sd != nil {
		modes = append(modes, string(sd.MeshGateway.Mode))
	}
	if pd, ok := b.entries().Get(configentry.ProxyDefaults, configentry.GlobalName).(*consul.ProxyConfigEntry); ok {
		modes = append(modes, string(pd.MeshGateway.Mode))
	}
	for _, m := range modes {
		if m != "" {
			return m
		}
	}
	return ""
}

// viaMeshGateway reports whether a target in targetDC is reached through
// mesh gateways in mode (never within the local datacenter).
func (b builder) viaMeshGateway(mode, targetDC string) bool {
	return targetDC != b.dc && (mode == meshGatewayLocal || mode == meshGatewayRemote)
}

// meshGatewayCLAName names the load assignment of a target reached
// through mesh gateways: the target's cluster name with the mode, since
// the same target reached directly (another proxy, mode none) has other
// endpoints. The cluster keeps the target's name (its SNI) and reads this
// assignment through eds_cluster_config.service_name.
func meshGatewayCLAName(clusterName, mode string) string {
	return clusterName + "~mesh-gateway-" + mode
}
