package cni

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/meshlet/meshlet/structs"
)

// ifName is the allocation's interface inside its namespace.
const ifName = "eth0"

// PortMapEntry is one entry of the portmap plugin's portMappings runtime
// capability (see the CNI CONVENTIONS document).
type PortMapEntry struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

// PortMappings turns an allocation's assigned ports into portmap entries:
// one per protocol (tcp, udp) per port. Value is the host port; To is the
// port inside the namespace (To <= 0 means the same as Value). HostIP is
// ignored, as Nomad does in bridge mode: ports are mapped on every host
// address, including 127.0.0.1. Duplicate host ports are an error.
func PortMappings(ports []structs.PortMapping) ([]PortMapEntry, error) {
	out := make([]PortMapEntry, 0, 2*len(ports))
	seen := map[int]string{}
	for _, p := range ports {
		to := p.To
		if to <= 0 {
			to = p.Value
		}
		if p.Value <= 0 || p.Value > 65535 || to > 65535 {
			return nil, newError(ErrInvalidAllocation, fmt.Sprintf("port %q has invalid mapping %d -> %d (want 1-65535)", p.Label, p.Value, to), nil)
		}
		if prev, ok := seen[p.Value]; ok {
			return nil, newError(ErrInvalidAllocation, fmt.Sprintf("ports %q and %q both use host port %d", prev, p.Label, p.Value), nil)
		}
		seen[p.Value] = p.Label
		for _, proto := range []string{"tcp", "udp"} {
			out = append(out, PortMapEntry{HostPort: p.Value, ContainerPort: to, Protocol: proto})
		}
	}
	return out, nil
}

// cniArgs returns the CNI_ARGS of an allocation. Values CNI_ARGS cannot
// carry (containing ';' or '=') are left out.
func cniArgs(alloc *structs.Allocation) [][2]string {
	args := [][2]string{{"IgnoreUnknown", "true"}}
	add := func(k, v string) {
		if v != "" && !strings.ContainsAny(v, ";=") {
			args = append(args, [2]string{k, v})
		}
	}
	if alloc.Job != nil {
		add("NOMAD_REGION", alloc.Job.Region)
	}
	add("NOMAD_NAMESPACE", alloc.Namespace)
	add("NOMAD_JOB_ID", alloc.JobID)
	add("NOMAD_GROUP_NAME", alloc.TaskGroup)
	add("NOMAD_ALLOC_ID", alloc.ID)
	return args
}

// runtimeConf builds libcni's runtime configuration for an allocation.
func (m *Manager) runtimeConf(alloc *structs.Allocation) (*libcni.RuntimeConf, error) {
	var ports []structs.PortMapping
	if alloc.AllocatedResources != nil {
		ports = alloc.AllocatedResources.Shared.Ports
	}
	maps, err := PortMappings(ports)
	if err != nil {
		return nil, err
	}
	rt := &libcni.RuntimeConf{
		ContainerID: alloc.ID,
		NetNS:       m.NetNSPath(alloc.ID),
		IfName:      ifName,
		Args:        cniArgs(alloc),
	}
	if len(maps) > 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": maps}
	}
	return rt, nil
}
