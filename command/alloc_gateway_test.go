package command

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func TestGatewayLabel(t *testing.T) {
	for kind, want := range map[string][2]string{
		"connect-ingress:ing":       {"ing", "Ingress Gateway"},
		"connect-terminating:tgw":   {"tgw", "Terminating Gateway"},
		"connect-mesh:mesh-gateway": {"mesh-gateway", "Mesh Gateway"},
		"connect-proxy:web":         {"", ""},
	} {
		svc, label := gatewayLabel(&nomadapi.Task{Kind: kind})
		if svc != want[0] || label != want[1] {
			t.Errorf("gatewayLabel(%q) = %q, %q; want %q, %q", kind, svc, label, want[0], want[1])
		}
	}
}
