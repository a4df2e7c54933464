package scheduler

import (
	"fmt"
	"sort"

	"github.com/meshlet/meshlet/structs"
)

// placer holds the per-node port usage while one plan is computed.
type placer struct {
	g     *Generic
	job   *structs.Job
	nodes []*structs.Node
	// used maps node ID → host port → the allocation holding it.
	used map[string]map[int]*structs.Allocation
	// count is the number of live allocations per node (spread ties).
	count map[string]int
}

type reasons struct {
	filtered  []string
	exhausted []string
}

func newPlacer(g *Generic, job *structs.Job, allocs []*structs.Allocation, nodes []*structs.Node) *placer {
	p := &placer{g: g, job: job, used: map[string]map[int]*structs.Allocation{}, count: map[string]int{}}
	p.nodes = append(p.nodes, nodes...)
	sort.Slice(p.nodes, func(i, j int) bool {
		if p.nodes[i].Name != p.nodes[j].Name {
			return p.nodes[i].Name < p.nodes[j].Name
		}
		return p.nodes[i].ID < p.nodes[j].ID
	})
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusStop || a.TerminalStatus() {
			continue
		}
		p.claim(a)
	}
	return p
}

func (p *placer) claim(a *structs.Allocation) {
	p.count[a.NodeID]++
	if a.AllocatedResources == nil {
		return
	}
	m := p.used[a.NodeID]
	if m == nil {
		m = map[int]*structs.Allocation{}
		p.used[a.NodeID] = m
	}
	for _, pm := range a.AllocatedResources.Shared.Ports {
		m[pm.Value] = a
	}
}

// release frees what an allocation the plan stops was holding.
func (p *placer) release(a *structs.Allocation) {
	if a.TerminalStatus() {
		return // never claimed
	}
	p.count[a.NodeID]--
	if a.AllocatedResources == nil {
		return
	}
	for _, pm := range a.AllocatedResources.Shared.Ports {
		if p.used[a.NodeID][pm.Value] != nil && p.used[a.NodeID][pm.Value].ID == a.ID {
			delete(p.used[a.NodeID], pm.Value)
		}
	}
}

// place picks the feasible node with the fewest allocations that has the
// group's ports free, and returns the new allocation, or nil and why not.
func (p *placer) place(tg *structs.TaskGroup, index int) (*structs.Allocation, *reasons) {
	why := &reasons{}
	var candidates []*structs.Node
	for _, n := range p.nodes {
		if r := feasible(p.job, tg, n); r != "" {
			why.filtered = append(why.filtered, r)
			continue
		}
		candidates = append(candidates, n)
	}
	if len(p.nodes) == 0 {
		why.filtered = append(why.filtered, "no nodes registered")
	}
	sort.SliceStable(candidates, func(i, j int) bool { return p.count[candidates[i].ID] < p.count[candidates[j].ID] })
	for _, n := range candidates {
		res, err := p.assignPorts(tg, n)
		if err != nil {
			why.exhausted = append(why.exhausted, err.Error())
			continue
		}
		a := p.g.newAlloc(p.job, tg, index, n, res)
		p.claim(a)
		return a, nil
	}
	return nil, why
}

// assignPorts resolves the group network's static and dynamic ports on node.
func (p *placer) assignPorts(tg *structs.TaskGroup, n *structs.Node) (*structs.AllocatedResources, error) {
	res := &structs.AllocatedResources{}
	if len(tg.Networks) == 0 {
		return res, nil
	}
	used := p.used[n.ID]
	taken := map[int]bool{}
	ip := p.g.cfg.AdvertiseIP
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
