package configentry

import (
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// checkMeshGateway checks (and lower-cases) a MeshGateway block's Mode:
// "", "none", "local" or "remote", as Consul accepts.
func checkMeshGateway(where string, m *consul.MeshGatewayConfig) error {
	mode := consul.MeshGatewayMode(strings.ToLower(string(m.Mode)))
	switch mode {
	case consul.MeshGatewayModeDefault, consul.MeshGatewayModeNone, consul.MeshGatewayModeLocal, consul.MeshGatewayModeRemote:
		m.Mode = mode
		return nil
	}
	return invalidf("%sMeshGateway.Mode %q is not one of \"local\", \"remote\", \"none\"", where, m.Mode)
}
