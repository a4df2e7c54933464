package jobspecs

import (
	"fmt"
	"slices"

	"github.com/meshlet/meshlet/structs"
)

// Mesh gateway modes of an upstream's mesh_gateway block (Consul's
// MeshGatewayMode; "" leaves the choice to the config entries).
var meshGatewayModes = []string{"", "none", "local", "remote"}

// checkUpstreamMeshGateway checks an upstream's mesh_gateway block: a
// known mode, and a datacenter to reach through it (a mode on a local
// upstream changes nothing, as in Consul; a warning says so).
func checkUpstreamMeshGateway(u *structs.ConsulUpstream, name string, up path, report reporter) {
	if u.MeshGateway == nil {
		return
	}
	mp := up.sub("mesh_gateway").attr("mode")
	if !slices.Contains(meshGatewayModes, u.MeshGateway.Mode) {
		report(SeverityError, mp, "Invalid mesh_gateway mode", fmt.Sprintf(
			"Upstream %s: mesh_gateway mode %q must be one of \"local\", \"remote\" or \"none\".", name, u.MeshGateway.Mode))
		return
	}
	if u.Datacenter == "" && (u.MeshGateway.Mode == "local" || u.MeshGateway.Mode == "remote") {
		report(SeverityWarning, mp, "mesh_gateway without datacenter", fmt.Sprintf(
			"Upstream %s has no datacenter: mesh gateways only carry traffic to other datacenters, so mode %q has no effect.", name, u.MeshGateway.Mode))
	}
}
