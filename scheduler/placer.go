package scheduler

import (
	"sort"

	"github.com/meshlet/meshlet/structs"
)

// placer holds what the nodes are running while one plan is computed:
// the live allocations (existing ones the plan keeps, plus those it
// places) and the host ports they hold.
type placer struct {
	g     *Generic
	job   *structs.Job
	nodes []*structs.Node
	byID  map[string]*structs.Node
	// used maps node ID → host port → the allocation holding it.
	used map[string]map[int]*structs.Allocation
	// live maps node ID → the non-terminal allocations on it.
	live map[string][]*structs.Allocation
}

// reasons are why one placement failed: one entry per node, its key in
// Failure.Filtered or Failure.Exhausted.
type reasons struct {
	filtered  []string
	exhausted []string
}

func newPlacer(g *Generic, job *structs.Job, allocs []*structs.Allocation, nodes []*structs.Node) *placer {
	p := &placer{g: g, job: job, byID: map[string]*structs.Node{},
		used: map[string]map[int]*structs.Allocation{}, live: map[string][]*structs.Allocation{}}
	p.nodes = append(p.nodes, nodes...)
	sort.Slice(p.nodes, func(i, j int) bool {
		if p.nodes[i].Name != p.nodes[j].Name {
			return p.nodes[i].Name < p.nodes[j].Name
		}
		return p.nodes[i].ID < p.nodes[j].ID
	})
	for _, n := range p.nodes {
		p.byID[n.ID] = n
	}
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusStop || a.TerminalStatus() {
			continue
		}
		p.claim(a)
	}
	return p
}

func (p *placer) claim(a *structs.Allocation) {
	p.live[a.NodeID] = append(p.live[a.NodeID], a)
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
	live := p.live[a.NodeID]
	for i, b := range live {
		if b.ID == a.ID {
			p.live[a.NodeID] = append(live[:i:i], live[i+1:]...)
			break
		}
	}
	if a.AllocatedResources == nil {
		return
	}
	for _, pm := range a.AllocatedResources.Shared.Ports {
		if p.used[a.NodeID][pm.Value] != nil && p.used[a.NodeID][pm.Value].ID == a.ID {
			delete(p.used[a.NodeID], pm.Value)
		}
	}
}

// nodeLost reports whether allocations on the node are lost, as Nomad's
// tainted nodes: the node is down, disconnected (meshlet has no
// max_client_disconnect, so a disconnected node is as good as down), or
// no longer registered.
func (p *placer) nodeLost(nodeID string) bool {
	n := p.byID[nodeID]
	return n == nil || n.Status == structs.NodeStatusDown || n.Status == structs.NodeStatusDisconnected
}

// option is a node that can take the allocation, with its score.
type option struct {
	node  *structs.Node
	res   *structs.AllocatedResources
	score float64
}

// place picks, as Nomad does, the best-scoring node among those that pass
// every filter and have room (ports, cpu, memory), and returns the new
// allocation, or nil and why each node was refused. avoid lists the nodes
// a rescheduled allocation failed on (scored down, not excluded).
//
// Ties go to the node with fewer live allocations, then to the first node
// by name and ID, so that plans are deterministic.
func (p *placer) place(tg *structs.TaskGroup, index int, avoid map[string]bool) (*structs.Allocation, *reasons) {
	why := &reasons{}
	if len(p.nodes) == 0 {
		why.filtered = append(why.filtered, "no nodes registered")
		return nil, why
	}
	r := p.groupRules(tg)
	var best *option
	for _, n := range p.nodes {
		o := p.fit(r, tg, n, avoid[n.ID], why)
		if o == nil {
			continue
		}
		if best == nil || o.score > best.score ||
			(o.score == best.score && len(p.live[n.ID]) < len(p.live[best.node.ID])) {
			best = o
		}
	}
	if best == nil {
		return nil, why
	}
	a := p.g.newAlloc(p.job, tg, index, best.node, best.res)
	p.claim(a)
	return a, nil
}

// placeOn places the group's allocation on node n if n can take it (the
// system scheduler's placement), or returns why not.
func (p *placer) placeOn(tg *structs.TaskGroup, index int, n *structs.Node) (*structs.Allocation, *reasons) {
	why := &reasons{}
	o := p.fit(p.groupRules(tg), tg, n, false, why)
	if o == nil {
		return nil, why
	}
	a := p.g.newAlloc(p.job, tg, index, n, o.res)
	p.claim(a)
	return a, nil
}

// fit checks node n for the group: every filter, then room (ports, cpu,
// memory). It returns the scored option, or nil after adding n's reason
// to why.
func (p *placer) fit(r *rules, tg *structs.TaskGroup, n *structs.Node, avoided bool, why *reasons) *option {
	if reason := feasible(p.job, tg, n); reason != "" {
		why.filtered = append(why.filtered, reason)
		return nil
	}
	if reason := r.distinct(p, n); reason != "" {
		why.filtered = append(why.filtered, reason)
		return nil
	}
	res, err := p.assignPorts(tg, n)
	if err != nil {
		why.exhausted = append(why.exhausted, err.Error())
		return nil
	}
	used, ask, capacity := p.usage(n), groupAsk(tg, n), nodeCapacity(n)
	if dim := exhaustedDimension(capacity, used, ask); dim != "" {
		why.exhausted = append(why.exhausted, dim)
		return nil
	}
	return &option{node: n, res: res, score: p.score(r, n, used.add(ask), capacity, avoided)}
}

// score is Nomad's normalized score: the mean of binpack (always), job
// anti-affinity (when the node already runs allocations of the group),
// the reschedule penalty (on a node the allocation failed on) and spread
// (when the group has spread blocks and the score is not 0).
func (p *placer) score(r *rules, n *structs.Node, after, capacity resources, avoided bool) float64 {
	scores := []float64{binpackScore(capacity, after)}
	if c := r.collisions(p, n); c > 0 {
		scores = append(scores, antiAffinityScore(c, r.tg.Count))
	}
	if avoided {
		scores = append(scores, -1)
	}
	if s := r.spreadScore(n); s != 0 {
		scores = append(scores, s)
	}
	sum := 0.0
	for _, s := range scores {
		sum += s
	}
	return sum / float64(len(scores))
}

// usage sums the resources of the live allocations on node n.
func (p *placer) usage(n *structs.Node) resources {
	var u resources
	for _, a := range p.live[n.ID] {
		u = u.add(allocAsk(a, n))
	}
	return u
}
