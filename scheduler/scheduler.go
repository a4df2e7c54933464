// Package scheduler decides placement: given a job, the allocations that
// exist and the nodes, it computes a Plan (allocations to place, to stop and
// to update in place) and explains every placement it could not make.
//
// Placement works as Nomad's generic scheduler: a node must be ready,
// eligible and not draining, in one of the job's datacenters, with the
// drivers, the constraints (distinct_hosts and distinct_property
// included), the static ports and the cpu and memory the group needs; the
// feasible nodes are scored (binpack, job anti-affinity, spread, the
// reschedule penalty) and the best one wins. Allocations on down or
// deregistered nodes are marked lost and replaced; those on draining nodes
// are migrated (see migrates).
//
// The scheduler is pure: it reads its inputs, never mutates them, and does
// no I/O, so the server persists the plan it returns. A Generic scheduler is
// safe for concurrent use; the server still serializes Process calls so that
// two plans never hand out the same port.
package scheduler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/structs"
)

// Descriptions set on allocations the plan stops, as Nomad words them.
const (
	DescJobStopped   = "alloc not needed since job has been stopped"
	DescJobUpdated   = "alloc is being updated due to job update"
	DescCountReduced = "alloc not needed due to job update"
	DescGroupRemoved = "alloc not needed as task group was removed"
	DescAllocLost    = "alloc is lost since its node is down"
	// DescAllocMigrating is Nomad's allocMigrating: the allocation's node
	// is draining.
	DescAllocMigrating = "alloc is being migrated"
)

// Scheduler computes placement plans.
type Scheduler interface {
	// Process plans job against allocs (every allocation the caller knows
	// of: the job's own and other jobs' on the same nodes, used for port
	// conflicts) and nodes.
	Process(job *structs.Job, allocs []*structs.Allocation, nodes []*structs.Node, opts Options) (*Plan, error)
}

// Options are the per-run inputs of Process.
type Options struct {
	// Now is the time reschedule delays are measured against; zero = the
	// scheduler's clock.
	Now time.Time
	// ForceReschedule replaces failed allocations at once, whatever their
	// delay and attempts (the operator submitted the job again).
	ForceReschedule bool
}

// Plan is the outcome of one scheduler run.
type Plan struct {
	// Place are new allocations (desired run, client pending).
	Place []*structs.Allocation
	// Stop are copies of existing allocations with desired status stop.
	Stop []*structs.Allocation
	// Update are copies of existing allocations whose group did not change
	// but whose job did (e.g. a count change): their Job is replaced in place.
	Update []*structs.Allocation
	// Failures explains the placements that could not be made, per group.
	Failures []*Failure
	// FollowUps are failed allocations to replace later, once their
	// reschedule delay has passed.
	FollowUps []*FollowUp
}

// FollowUp is a failed allocation waiting for its reschedule delay.
type FollowUp struct {
	Alloc     *structs.Allocation
	WaitUntil time.Time
}

// Failure explains why a group's allocations could not be placed.
type Failure struct {
	Group string
	// Count is how many allocations of the group were not placed.
	Count          int
	NodesEvaluated int
	// Filtered maps a reason ("driver docker not available on node n1",
	// "distinct_hosts", "node not ready") to the number of nodes it
	// excluded (Nomad's AllocMetric.ConstraintFiltered).
	Filtered map[string]int
	// Exhausted maps a resource dimension ("cpu", "memory", a port
	// collision) to the number of nodes that had no room (Nomad's
	// AllocMetric.DimensionExhausted).
	Exhausted map[string]int
}

// Reasons returns every reason of the failure, sorted.
func (f *Failure) Reasons() []string {
	var out []string
	for r := range f.Filtered {
		out = append(out, r)
	}
	for r := range f.Exhausted {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Config tunes the Generic scheduler.
type Config struct {
	// MinDynamicPort and MaxDynamicPort bound dynamic ports (inclusive);
	// defaults 20000 and 32000.
	MinDynamicPort int
	MaxDynamicPort int
	// Rand picks the start of the dynamic port scan; nil = math/rand/v2.
	Rand func(n int) int
	// Now stamps allocations; nil = time.Now.
	Now func() time.Time
}

// Generic is meshlet's scheduler: service and batch jobs are placed by
// count (Nomad's generic scheduler), system and sysbatch jobs on every
// node that can run them (system.go).
type Generic struct {
	cfg    Config
	logger hclog.Logger
}

var _ Scheduler = (*Generic)(nil)

// New returns a Generic scheduler; zero Config fields take their defaults.
func New(cfg Config, logger hclog.Logger) (*Generic, error) {
	if cfg.MinDynamicPort == 0 {
		cfg.MinDynamicPort = 20000
	}
	if cfg.MaxDynamicPort == 0 {
		cfg.MaxDynamicPort = 32000
	}
	if cfg.MinDynamicPort < 1 || cfg.MaxDynamicPort > 65535 || cfg.MinDynamicPort > cfg.MaxDynamicPort {
		return nil, fmt.Errorf("invalid dynamic port range %d-%d", cfg.MinDynamicPort, cfg.MaxDynamicPort)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.IntN
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Generic{cfg: cfg, logger: logger}, nil
}

// Process implements Scheduler.
func (g *Generic) Process(job *structs.Job, allocs []*structs.Allocation, nodes []*structs.Node, opts Options) (*Plan, error) {
	if job == nil {
		return nil, fmt.Errorf("failed to schedule: no job")
	}
	if opts.Now.IsZero() {
		opts.Now = g.cfg.Now()
	}
	plan := &Plan{}
	var mine []*structs.Allocation
	for _, a := range allocs {
		if a.JobID == job.ID && a.DesiredStatus != structs.AllocDesiredStatusStop {
			mine = append(mine, a)
		}
	}
	pl := newPlacer(g, job, allocs, nodes)
	// An allocation stopped on a lost node is lost: its node will never
	// report the stop (Nomad's reconciler marks it so).
	stop := func(a *structs.Allocation, desc string) *structs.Allocation {
		if pl.nodeLost(a.NodeID) {
			return lostCopy(a)
		}
		return stopCopy(a, desc)
	}
	if job.Stop {
		for _, a := range mine {
			plan.Stop = append(plan.Stop, stop(a, DescJobStopped))
		}
		return plan, nil
	}
	byGroup := map[string][]*structs.Allocation{}
	for _, a := range mine {
		if job.LookupTaskGroup(a.TaskGroup) == nil {
			plan.Stop = append(plan.Stop, stop(a, DescGroupRemoved))
			pl.release(a)
			continue
		}
		byGroup[a.TaskGroup] = append(byGroup[a.TaskGroup], a)
	}
	if job.IsSystem() {
		g.processSystem(plan, pl, job, byGroup, opts)
	} else {
		for _, tg := range job.TaskGroups {
			g.reconcileGroup(plan, pl, job, tg, byGroup[tg.Name], opts)
		}
	}
	g.logger.Debug("computed plan", "job_id", job.ID, "place", len(plan.Place), "stop", len(plan.Stop),
		"update", len(plan.Update), "failed_groups", len(plan.Failures))
	return plan, nil
}

// want is a slot to fill, replacing prev when set.
type want struct {
	index int
	prev  *structs.Allocation
	// desc is the stop description of prev; tracker the replacement's
	// reschedule history.
	desc    string
	tracker *structs.RescheduleTracker
	// lost: prev's node is down or gone; prev is stopped as lost even
	// when no replacement can be placed.
	lost bool
	// forced: prev's node drain reached its deadline; prev is stopped
	// even when no replacement can be placed (before it, prev keeps
	// running until one can).
	forced bool
}

// reconcileGroup keeps, replaces, reschedules, updates or stops the group's
// allocations slot by slot (one slot per index below Count) and places the
// missing ones.
func (g *Generic) reconcileGroup(plan *Plan, pl *placer, job *structs.Job, tg *structs.TaskGroup, existing []*structs.Allocation, opts Options) {
	sort.Slice(existing, func(i, j int) bool { return existing[i].CreateIndex < existing[j].CreateIndex })
	slots := map[int]*structs.Allocation{}
	for _, a := range existing {
		idx := a.Index()
		if idx >= tg.Count || slots[idx] != nil {
			plan.Stop = append(plan.Stop, stopCopy(a, DescCountReduced))
			pl.release(a)
			continue
		}
		slots[idx] = a
	}
	// Replacements release their predecessors' ports before anything is placed.
	var wants []want
	for idx := 0; idx < tg.Count; idx++ {
		a := slots[idx]
		switch {
		case a == nil:
			wants = append(wants, want{index: idx})
		case !a.TerminalStatus() && pl.nodeLost(a.NodeID):
			wants = append(wants, want{index: idx, prev: a, desc: DescAllocLost, lost: true})
			pl.release(a)
		case !a.TerminalStatus() && migrates(pl.byID[a.NodeID], job, opts.Now):
			forced := drainForced(pl.byID[a.NodeID].DrainStrategy, opts.Now)
			wants = append(wants, want{index: idx, prev: a, desc: DescAllocMigrating, forced: forced})
			pl.release(a)
		case outdated(a, job, tg.Name, pl.byID[a.NodeID]):
			wants = append(wants, want{index: idx, prev: a, desc: DescJobUpdated})
			pl.release(a)
		case a.NeedsReschedule():
			if w := reschedule(plan, job, tg, a, opts); w != nil {
				wants = append(wants, *w)
			}
		case newVersion(a, job):
			cp := *a
			cp.Job = job
			plan.Update = append(plan.Update, &cp)
		}
	}
	g.placeWants(plan, pl, tg, wants)
}

// reschedule decides about a failed allocation: replace it now (returns the
// slot to fill), later (a follow-up), or never (attempts used up).
func reschedule(plan *Plan, job *structs.Job, tg *structs.TaskGroup, a *structs.Allocation, opts Options) *want {
	p := ReschedulePolicy(job, tg)
	if opts.ForceReschedule {
		return &want{index: a.Index(), prev: a, desc: DescRescheduled}
	}
	at, ok := NextReschedule(a, p)
	switch {
	case !ok:
		return nil
	case !at.After(opts.Now):
		return &want{index: a.Index(), prev: a, desc: DescRescheduled, tracker: rescheduleTracker(a, p, opts.Now)}
	case a.FollowupEvalID == "":
		plan.FollowUps = append(plan.FollowUps, &FollowUp{Alloc: a, WaitUntil: at})
	}
	return nil
}

func (g *Generic) placeWants(plan *Plan, pl *placer, tg *structs.TaskGroup, wants []want) {
	var failure *Failure
	for _, w := range wants {
		alloc, reasons := pl.place(tg, w.index, avoidNodes(w))
		if alloc == nil {
			switch {
			case w.lost:
				plan.Stop = append(plan.Stop, lostCopy(w.prev))
			case w.forced:
				plan.Stop = append(plan.Stop, stopCopy(w.prev, w.desc))
			case w.prev != nil && !w.prev.TerminalStatus():
				// prev keeps running: what it holds is not free for
				// the rest of the plan (Nomad backs its stop out).
				pl.claim(w.prev)
			}
			if failure == nil {
				failure = &Failure{Group: tg.Name, NodesEvaluated: len(pl.nodes), Filtered: map[string]int{}, Exhausted: map[string]int{}}
			}
			failure.Count++
			mergeReasons(failure, reasons)
			continue
		}
		if w.prev != nil {
			alloc.PreviousAllocation = w.prev.ID
			alloc.RescheduleTracker = w.tracker
			stop := stopCopy(w.prev, w.desc)
			if w.lost {
				stop = lostCopy(w.prev)
			}
			stop.NextAllocation = alloc.ID
			plan.Stop = append(plan.Stop, stop)
		}
		plan.Place = append(plan.Place, alloc)
	}
	if failure != nil {
		plan.Failures = append(plan.Failures, failure)
	}
}

// migrates reports whether an allocation on node n moves off it because
// the node is draining: at once for a service job, at the drain's
// deadline for a batch job (Nomad lets batch work finish until then).
func migrates(n *structs.Node, job *structs.Job, now time.Time) bool {
	if n == nil || !n.Draining() {
		return false
	}
	return !job.RunsToCompletion() || drainForced(n.DrainStrategy, now)
}

// drainForced reports whether a drain's deadline has come, as Nomad's
// DrainStrategy.DeadlineTime: a negative Deadline forces at once, zero
// never does, and a Drain without a strategy counts as forced.
func drainForced(d *structs.DrainStrategy, now time.Time) bool {
	switch {
	case d == nil || d.Deadline < 0:
		return true
	case d.Deadline == 0:
		return false
	}
	return !now.Before(d.ForceDeadline)
}

// avoidNodes are the nodes a rescheduled allocation and its predecessors
// failed on: Nomad scores them down so the replacement goes elsewhere when
// it can.
func avoidNodes(w want) map[string]bool {
	if w.prev == nil || w.desc != DescRescheduled {
		return nil
	}
	out := map[string]bool{w.prev.NodeID: true}
	if t := w.prev.RescheduleTracker; t != nil {
		for _, ev := range t.Events {
			out[ev.PrevNodeID] = true
		}
	}
	return out
}

// mergeReasons records the per-node reasons of the first failed placement;
// later failures of the same group only add to Count (Nomad coalesces them).
func mergeReasons(f *Failure, r *reasons) {
	if f.Count > 1 {
		return
	}
	for _, s := range r.filtered {
		f.Filtered[s]++
	}
	for _, s := range r.exhausted {
		f.Exhausted[s]++
	}
}

func (g *Generic) newAlloc(job *structs.Job, tg *structs.TaskGroup, index int, node *structs.Node, res *structs.AllocatedResources) *structs.Allocation {
	now := g.cfg.Now().UnixNano()
	return &structs.Allocation{
		ID:                 uuid.NewString(),
		Namespace:          job.Namespace,
		Name:               fmt.Sprintf("%s.%s[%d]", job.ID, tg.Name, index),
		NodeID:             node.ID,
		NodeName:           node.Name,
		JobID:              job.ID,
		Job:                job,
		TaskGroup:          tg.Name,
		AllocatedResources: res,
		DesiredStatus:      structs.AllocDesiredStatusRun,
		ClientStatus:       structs.AllocClientStatusPending,
		CreateTime:         now,
		ModifyTime:         now,
	}
}

func stopCopy(a *structs.Allocation, desc string) *structs.Allocation {
	cp := *a
	cp.DesiredStatus = structs.AllocDesiredStatusStop
	cp.DesiredDescription = desc
	return &cp
}

// lostCopy is a copy of an allocation whose node is down: stopped, and
// lost for the client status, as Nomad marks it.
func lostCopy(a *structs.Allocation) *structs.Allocation {
	cp := stopCopy(a, DescAllocLost)
	cp.ClientStatus = structs.AllocClientStatusLost
	return cp
}

// outdated reports whether allocation a, on node n, cannot be updated in
// place to job: its group changed, or, for a new version, the allocation
// runs and n no longer satisfies the job's datacenters or constraints
// (Nomad checks the node again before an in-place update).
func outdated(a *structs.Allocation, job *structs.Job, group string, n *structs.Node) bool {
	if a.Job == nil || groupChanged(a.Job, job, group) {
		return true
	}
	return newVersion(a, job) && !a.TerminalStatus() && n != nil && !jobRulesHold(job, n)
}

// newVersion reports whether a runs another version of job than job.
func newVersion(a *structs.Allocation, job *structs.Job) bool {
	return a.Job.Version != job.Version || a.Job.JobModifyIndex != job.JobModifyIndex
}

// groupChanged reports whether the group's spec (ignoring its count and
// reschedule policy) or the job-level settings that reach tasks differ
// between two job versions.
func groupChanged(old, cur *structs.Job, group string) bool {
	ot, ct := old.LookupTaskGroup(group), cur.LookupTaskGroup(group)
	if ot == nil || ct == nil {
		return true
	}
	o, c := *ot, *ct
	o.Count, c.Count = 0, 0
	// How failures are replaced does not change what runs (Nomad updates
	// the reschedule policy in place).
	o.ReschedulePolicy, c.ReschedulePolicy = nil, nil
	return !jsonEqual(&o, &c) || !jsonEqual(old.Meta, cur.Meta) ||
		old.Region != cur.Region || old.Namespace != cur.Namespace
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
