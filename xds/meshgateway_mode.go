package xds

import (
	"strings"

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

// meshGatewayMode is the mode own's upstream up imposes on every target
// of its chain (Consul's OverrideMeshGateway), the first set of: the
// upstream's own mesh_gateway block; own's service-defaults
// UpstreamConfig (the override naming the upstream, then the defaults);
// own's service-defaults MeshGateway; proxy-defaults' MeshGateway (Consul
// resolves proxy-defaults into the proxy's and each upstream's own mode,
// so it overrides targets too). "none" is a choice like the others (it
// stops the search); "" is none: each target then takes its own
// (targetMeshGatewayMode).
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
	modes = append(modes, b.proxyDefaultsMeshGatewayMode())
	for _, m := range modes {
		if m != "" {
			return m
		}
	}
	return ""
}

// targetMeshGatewayMode is the mode of one target of a chain, as Consul's
// chain compiler sets it per target (so a redirect or a failover to
// another service follows that service's mode): the upstream's override
// when set, else the target service's own service-defaults MeshGateway,
// else proxy-defaults'.
func (b builder) targetMeshGatewayMode(override string, t *configentry.Target) string {
	if override != "" {
		return override
	}
	if sd := b.serviceDefaults(t.Service); sd != nil && sd.MeshGateway.Mode != "" {
		return string(sd.MeshGateway.Mode)
	}
	return b.proxyDefaultsMeshGatewayMode()
}

func (b builder) proxyDefaultsMeshGatewayMode() string {
	if pd, ok := b.entries().Get(configentry.ProxyDefaults, configentry.GlobalName).(*consul.ProxyConfigEntry); ok {
		return string(pd.MeshGateway.Mode)
	}
	return ""
}

// gatewaySource routes src (the endpoints of a target in mode) through
// the mesh gateways when the mode and its datacenter call for it.
func (b builder) gatewaySource(src endpointSource, mode string) endpointSource {
	if b.viaMeshGateway(mode, src.dc) {
		src.gateway = mode
	}
	return src
}

// claGatewayKey is claKey.gateway for a load assignment of sources: ""
// when none goes through mesh gateways; the mode when every source in
// another datacenter goes through gateways of that one mode; else each
// such source's way in order (its mode, "none" when dialed directly),
// joined by "+": targets of one chain may differ in mode, and the same
// target reached with other modes must name another load assignment.
func claGatewayKey(sources []endpointSource, localDC string) string {
	var ways []string
	uniform := true
	for _, s := range sources {
		if s.dc == localDC {
			continue
		}
		w := s.gateway
		if w == "" {
			w = meshGatewayNone
		}
		uniform = uniform && (len(ways) == 0 || w == ways[0])
		ways = append(ways, w)
	}
	switch {
	case len(ways) == 0 || uniform && ways[0] == meshGatewayNone:
		return ""
	case uniform:
		return ways[0]
	}
	return strings.Join(ways, "+")
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
