package connect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// gatewayHostMode reports whether a gateway group runs in the host's
// network namespace: no network block, or one in host mode.
func gatewayHostMode(tg *structs.TaskGroup) bool {
	return len(tg.Networks) == 0 || (len(tg.Networks) == 1 && (tg.Networks[0].Mode == "" || tg.Networks[0].Mode == structs.NetworkModeHost))
}

// checkGatewayNetwork accepts a gateway group in bridge, cni/* or host
// network mode (Nomad's rule).
func checkGatewayNetwork(tg *structs.TaskGroup) error {
	if gatewayHostMode(tg) {
		return nil
	}
	return checkNetwork(tg)
}

// hostAdminPort is where a host-mode gateway's admin listener binds on
// 127.0.0.2, as Nomad does it: the gateway service's own port (a number,
// or its label's host port when the task starts). An address on the host
// must not clash between allocations, which 19000+index would.
func hostAdminPort(s *structs.Service) (string, error) {
	if s.PortLabel == "" {
		return "", fmt.Errorf("%w: gateway %q in host network mode needs a port: its proxy's admin listener binds 127.0.0.2 on it, as in Nomad", ErrInvalid, s.Name)
	}
	if n, err := strconv.Atoi(s.PortLabel); err == nil {
		return strconv.Itoa(n), nil
	}
	return "${NOMAD_HOST_PORT_" + envKey(s.PortLabel) + "}", nil
}

// envKey is a port label as it appears in NOMAD_*_<label> variables.
func envKey(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// hostGatewayTask adapts an injected gateway task to host network mode:
// the connect_proxy driver runs it in the host's namespace and its admin
// listener binds 127.0.0.2 on the gateway's port.
func hostGatewayTask(t *structs.Task, s *structs.Service) error {
	port, err := hostAdminPort(s)
	if err != nil {
		return err
	}
	t.Config["network_mode"] = structs.NetworkModeHost
	t.Config["admin_bind"] = "127.0.0.2:" + port
	return nil
}

// ProxyAdminBind is where a mesh service's proxy serves its admin API: in
// a namespace 127.0.0.2:<AdminBasePort+index>; for a gateway in host mode
// 127.0.0.2 on the gateway's port (its host port).
func ProxyAdminBind(a *structs.Allocation, tg *structs.TaskGroup, s *structs.Service, index int) (string, error) {
	if !s.Connect.IsGateway() || !gatewayHostMode(tg) {
		return fmt.Sprintf("127.0.0.2:%d", AdminBasePort+index), nil
	}
	port, err := resolvePort(a, s.PortLabel, false)
	if err != nil || port == 0 {
		return "", fmt.Errorf("%w: gateway %q in host network mode: no port for its admin listener: %v", ErrInvalid, s.Name, err)
	}
	return fmt.Sprintf("127.0.0.2:%d", port), nil
}
