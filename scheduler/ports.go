package scheduler

import (
	"fmt"

	"github.com/meshlet/meshlet/structs"
)

// assignPorts resolves the group network's static and dynamic ports on node.
func (p *placer) assignPorts(tg *structs.TaskGroup, n *structs.Node) (*structs.AllocatedResources, error) {
	res := &structs.AllocatedResources{}
	if len(tg.Networks) == 0 {
		return res, nil
	}
	used := p.used[n.ID]
	taken := map[int]bool{}
	ip := n.Attributes[nodeIPAttribute] // the node's advertised address
	if ip == "" {
		ip = "127.0.0.1" // a node that fingerprinted none: loopback only
	}
	net := *tg.Networks[0]
	net.ReservedPorts = append([]structs.Port(nil), tg.Networks[0].ReservedPorts...)
	net.DynamicPorts = append([]structs.Port(nil), tg.Networks[0].DynamicPorts...)
	for i, port := range net.ReservedPorts {
		if holder := used[port.Value]; holder != nil {
			return nil, fmt.Errorf("port %d already in use by allocation %s (job %s)", port.Value, holder.ID, holder.JobID)
		}
		if taken[port.Value] {
			return nil, fmt.Errorf("port %d requested twice by group %q", port.Value, tg.Name)
		}
		taken[port.Value] = true
		to := resolveTo(port)
		net.ReservedPorts[i].To = to
		res.Shared.Ports = append(res.Shared.Ports, structs.PortMapping{Label: port.Label, Value: port.Value, To: to, HostIP: ip})
	}
	for i, port := range net.DynamicPorts {
		v, err := p.freeDynamicPort(used, taken, n)
		if err != nil {
			return nil, err
		}
		taken[v] = true
		port.Value = v
		to := resolveTo(port)
		net.DynamicPorts[i].Value, net.DynamicPorts[i].To = v, to
		res.Shared.Ports = append(res.Shared.Ports, structs.PortMapping{Label: port.Label, Value: v, To: to, HostIP: ip})
	}
	res.Shared.Networks = []*structs.NetworkResource{&net}
	return res, nil
}

// resolveTo turns "to unset or -1" into the host port itself.
func resolveTo(p structs.Port) int {
	if p.To <= 0 {
		return p.Value
	}
	return p.To
}

func (p *placer) freeDynamicPort(used map[int]*structs.Allocation, taken map[int]bool, n *structs.Node) (int, error) {
	lo, hi := p.g.cfg.MinDynamicPort, p.g.cfg.MaxDynamicPort
	size := hi - lo + 1
	start := p.g.cfg.Rand(size)
	// The node's reserved ports (the agent's listeners, reserved_ports)
	// may lie inside the dynamic range, as in Nomad: the scan skips them.
	reserved := reservedPorts(n)
	for i := 0; i < size; i++ {
		v := lo + (start+i)%size
		if used[v] == nil && !taken[v] && !inRanges(reserved, v) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("no free dynamic port in range %d-%d on node %s", lo, hi, n.Name)
}
