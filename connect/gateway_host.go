package connect

import (
	"fmt"

	"github.com/meshlet/meshlet/client/taskenv"
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

// AdminPortLabel is the dynamic port a host-mode gateway's admin listener
// binds on 127.0.0.2: in the host's namespace, 19000+index would clash
// between allocations, and the gateway's own port may carry a listener
// (a terminating gateway's default bind is 0.0.0.0 on it).
func AdminPortLabel(service string) string { return "connect-admin-" + service }

// hostGatewayTask adapts an injected gateway task to host network mode:
// the connect_proxy driver runs it in the host's namespace and its admin
// listener binds 127.0.0.2 on a dynamic port of its own.
func hostGatewayTask(tg *structs.TaskGroup, t *structs.Task, s *structs.Service) {
	if len(tg.Networks) == 0 {
		tg.Networks = []*structs.NetworkResource{{Mode: structs.NetworkModeHost}}
	}
	label := AdminPortLabel(s.Name)
	ensureDynamicPort(tg.Networks[0], label)
	t.Config["network_mode"] = structs.NetworkModeHost
	t.Config["admin_bind"] = "127.0.0.2:${NOMAD_HOST_PORT_" + taskenv.CleanKey(label) + "}"
}

// ProxyAdminBind is where a mesh service's proxy serves its admin API: in
// a namespace 127.0.0.2:<AdminBasePort+index>; for a gateway in host mode
// 127.0.0.2 on its AdminPortLabel port.
func ProxyAdminBind(a *structs.Allocation, tg *structs.TaskGroup, s *structs.Service, index int) (string, error) {
	if !s.Connect.IsGateway() || !gatewayHostMode(tg) {
		return fmt.Sprintf("127.0.0.2:%d", AdminBasePort+index), nil
	}
	port, err := resolvePort(a, AdminPortLabel(s.Name), false)
	if err != nil || port == 0 {
		return "", fmt.Errorf("%w: gateway %q in host network mode: no port %q for its admin listener: %v", ErrInvalid, s.Name, AdminPortLabel(s.Name), err)
	}
	return fmt.Sprintf("127.0.0.2:%d", port), nil
}
