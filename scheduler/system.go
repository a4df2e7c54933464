package scheduler

import (
	"sort"

	"github.com/meshlet/meshlet/structs"
)

// System placement, as Nomad's system and sysbatch schedulers: every group
// of the job gets one allocation on every node that can run it (ready,
// eligible, not draining, in one of the job's datacenters, with the
// drivers, constraints, ports and room), so a node that joins later gets
// one at the next evaluation (the server evaluates every job on a node
// change) and the allocations of a node that leaves are lost. count is
// ignored (validation allows only 1).
//
// Differences from Nomad, on purpose: a failed system allocation is not
// replaced on its node until the job is submitted again (Nomad replaces it
// at the next evaluation, which for a task that fails at once is a loop
// bounded only by the restart policy); a node that drains keeps its
// system allocations until the drain's deadline, as Nomad drains them
// last. A sysbatch allocation that completed is not run again until the
// group changes.

// DescNodeTainted is Nomad's allocNodeTainted.
const DescNodeTainted = "alloc not needed as node is tainted"

// processSystem reconciles every group of a system or sysbatch job.
func (g *Generic) processSystem(plan *Plan, pl *placer, job *structs.Job, byGroup map[string][]*structs.Allocation, opts Options) {
	for _, tg := range job.TaskGroups {
		sg := &systemGroup{plan: plan, pl: pl, job: job, tg: tg, opts: opts}
		sg.reconcile(byGroup[tg.Name])
		if sg.failure != nil {
			plan.Failures = append(plan.Failures, sg.failure)
		}
	}
}

// systemGroup is one group's reconciliation.
type systemGroup struct {
	plan    *Plan
	pl      *placer
	job     *structs.Job
	tg      *structs.TaskGroup
	opts    Options
	failure *Failure
}

func (sg *systemGroup) reconcile(existing []*structs.Allocation) {
	sort.Slice(existing, func(i, j int) bool { return existing[i].CreateIndex < existing[j].CreateIndex })
	byNode := map[string][]*structs.Allocation{}
	for _, a := range existing {
		byNode[a.NodeID] = append(byNode[a.NodeID], a)
	}
	for nodeID, list := range byNode {
		if sg.pl.byID[nodeID] != nil {
			continue
		}
		for _, a := range list { // the node was deregistered
			if !a.TerminalStatus() {
				sg.plan.Stop = append(sg.plan.Stop, lostCopy(a))
				sg.pl.release(a)
			}
		}
	}
	for _, n := range sg.pl.nodes {
		list := byNode[n.ID]
		var cur *structs.Allocation
		if len(list) > 0 {
			cur = list[len(list)-1]
		}
		for _, a := range list[:max(len(list)-1, 0)] { // one per node: the newest stays
			if !a.TerminalStatus() {
				sg.plan.Stop = append(sg.plan.Stop, stopCopy(a, DescCountReduced))
				sg.pl.release(a)
			}
		}
		sg.node(n, cur)
	}
}

// node reconciles the group on node n, whose newest allocation of the
// group is cur (nil: none).
func (sg *systemGroup) node(n *structs.Node, cur *structs.Allocation) {
	pl, job := sg.pl, sg.job
	if cur == nil {
		sg.place(n, nil, "")
		return
	}
	changed := outdated(cur, job, sg.tg.Name, n)
	if cur.TerminalStatus() {
		switch {
		case changed, sg.opts.ForceReschedule && cur.ClientStatus != structs.AllocClientStatusComplete:
		case job.Type == structs.JobTypeSystem && cur.ClientStatus == structs.AllocClientStatusComplete:
			// A system task that exited 0 is replaced (it should run
			// everywhere); failed or lost ones wait for the job.
		default:
			return
		}
		sg.place(n, cur, DescJobUpdated)
		return
	}
	switch {
	case pl.nodeLost(n.ID):
		sg.plan.Stop = append(sg.plan.Stop, lostCopy(cur))
		pl.release(cur)
	case n.Draining() && drainForced(n.DrainStrategy, sg.opts.Now):
		sg.plan.Stop = append(sg.plan.Stop, stopCopy(cur, DescAllocMigrating))
		pl.release(cur)
	case changed:
		pl.release(cur)
		if !sg.place(n, cur, DescJobUpdated) {
			sg.plan.Stop = append(sg.plan.Stop, stopCopy(cur, DescNodeTainted))
		}
	case newVersion(cur, job):
		cp := *cur
		cp.Job = job
		sg.plan.Update = append(sg.plan.Update, &cp)
	}
}

// place puts the group on n, replacing prev (stopped with desc) when set.
// A node the group cannot run on is skipped (system jobs place where they
// can); a node without room is a placement failure, as in Nomad.
func (sg *systemGroup) place(n *structs.Node, prev *structs.Allocation, desc string) bool {
	a, why := sg.pl.placeOn(sg.tg, 0, n)
	if a == nil {
		if len(why.exhausted) > 0 {
			if sg.failure == nil {
				sg.failure = &Failure{Group: sg.tg.Name, NodesEvaluated: len(sg.pl.nodes), Filtered: map[string]int{}, Exhausted: map[string]int{}}
			}
			sg.failure.Count++
			for _, r := range why.exhausted {
				sg.failure.Exhausted[r]++
			}
		}
		return false
	}
	if prev != nil {
		a.PreviousAllocation = prev.ID
		stop := stopCopy(prev, desc)
		stop.NextAllocation = a.ID
		sg.plan.Stop = append(sg.plan.Stop, stop)
	}
	sg.plan.Place = append(sg.plan.Place, a)
	return true
}
