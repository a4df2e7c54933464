package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Node drain and scheduling eligibility, as Nomad's Node.UpdateDrain and
// Node.UpdateEligibility. Enabling a drain makes the node ineligible and
// evaluates the jobs running on it: the scheduler migrates their
// allocations (replacements elsewhere, the old ones stopped with
// scheduler.DescAllocMigrating; batch allocations at the deadline). A
// per-node check then runs every drainCheckInterval on the leader: at the
// drain's deadline it evaluates the jobs still running there (the
// scheduler stops what it could not move), and once every allocation on
// the node is terminal the drain completes — the strategy is cleared and
// the node stays ineligible.

// TriggerNodeDrain is the trigger of evaluations migrating allocations off
// a draining node, as Nomad names it.
const TriggerNodeDrain = "node-drain"

// drainCheckInterval is how often a draining node is checked for
// completion (and its deadline).
const drainCheckInterval = time.Second

// drainTimerPrefix keys the drain checks among the server's timers
// (evaluation IDs key the follow-ups).
const drainTimerPrefix = "drain/"

// NodeUpdate is the outcome of a drain or eligibility change.
type NodeUpdate struct {
	// NodeID is the node's full ID (the request may name a prefix).
	NodeID string
	// EvalIDs are the evaluations the change ran (never nil).
	EvalIDs []string
	// NodeModifyIndex is the node's modify index after the change.
	NodeModifyIndex uint64
}

// UpdateNodeEligibility marks the node (an ID or unique prefix) eligible
// or ineligible for new allocations; its running allocations stay. A
// draining node cannot be made eligible (Nomad). Making a node eligible
// evaluates every job, so placements that had no room are retried.
func (s *Server) UpdateNodeEligibility(ctx context.Context, nodeID string, eligible bool) (*NodeUpdate, error) {
	want := structs.NodeSchedulingIneligible
	if eligible {
		want = structs.NodeSchedulingEligible
	}
	node, changed, err := s.updateNode(nodeID, func(n *structs.Node) error {
		if eligible && n.Draining() {
			return invalid(fmt.Errorf("node %s is draining: can not set its scheduling eligibility to eligible", n.ID))
		}
		n.SchedulingEligibility = want
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &NodeUpdate{NodeID: node.ID, EvalIDs: []string{}, NodeModifyIndex: node.ModifyIndex}
	if changed {
		s.logger.Info("node scheduling eligibility changed", "node_id", node.ID, "eligibility", want)
		if eligible {
			res.EvalIDs = s.evaluateJobs(s.liveJobIDs(), TriggerNodeUpdate, node.ID)
		}
	}
	return res, nil
}

// UpdateNodeDrain starts, changes or (spec nil) cancels the drain of the
// node (an ID or unique prefix). A drain sets Drain and a DrainStrategy
// (StartedAt kept from a drain in progress; ForceDeadline = now +
// Deadline when Deadline > 0, as Nomad: a negative Deadline forces at
// once, zero never does) and makes the node ineligible; its jobs are
// evaluated so that its allocations migrate. Cancelling leaves the node
// ineligible unless markEligible.
func (s *Server) UpdateNodeDrain(ctx context.Context, nodeID string, spec *structs.DrainSpec, markEligible bool) (*NodeUpdate, error) {
	now := s.now().UTC()
	node, changed, err := s.updateNode(nodeID, func(n *structs.Node) error {
		if spec == nil {
			n.Drain, n.DrainStrategy = false, nil
			if markEligible {
				n.SchedulingEligibility = structs.NodeSchedulingEligible
			}
			return nil
		}
		ds := &structs.DrainStrategy{DrainSpec: *spec, StartedAt: now}
		if n.DrainStrategy != nil {
			ds.StartedAt = n.DrainStrategy.StartedAt
		}
		if spec.Deadline > 0 {
			ds.ForceDeadline = now.Add(spec.Deadline)
		}
		n.Drain, n.DrainStrategy = true, ds
		n.SchedulingEligibility = structs.NodeSchedulingIneligible
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &NodeUpdate{NodeID: node.ID, EvalIDs: []string{}, NodeModifyIndex: node.ModifyIndex}
	switch {
	case spec != nil:
		if changed {
			s.logger.Info("node drain set", "node_id", node.ID, "deadline", spec.Deadline,
				"force_deadline", node.DrainStrategy.ForceDeadline)
		}
		jobs, err := s.jobsOnNode(node.ID)
		if err != nil {
			return res, err
		}
		res.EvalIDs = s.evaluateJobs(jobs, TriggerNodeDrain, node.ID)
		s.checkDrain(node.ID) // an empty node is drained at once
	case changed:
		s.logger.Info("node drain cancelled", "node_id", node.ID, "eligibility", node.SchedulingEligibility)
		if node.Eligible() {
			res.EvalIDs = s.evaluateJobs(s.liveJobIDs(), TriggerNodeUpdate, node.ID)
		}
	}
	return res, nil
}

// updateNode applies change to a copy of the node (an ID or unique prefix)
// and stores it, under the plan lock so that no plan computed before sees
// the old node. It returns the node as stored and whether it changed.
func (s *Server) updateNode(idOrPrefix string, change func(n *structs.Node) error) (*structs.Node, bool, error) {
	if err := s.requireLeader(); err != nil {
		return nil, false, err
	}
	found, err := s.Node(context.Background(), idOrPrefix)
	if err != nil {
		return nil, false, err
	}
	s.planMu.Lock()
	defer s.planMu.Unlock()
	old, err := s.store.Node(found.ID)
	if err != nil {
		return nil, false, fmt.Errorf("failed to read node %s: %w", found.ID, err)
	}
	cp := *old
	if err := change(&cp); err != nil {
		return nil, false, err
	}
	if nodeEqual(old, &cp) {
		return old, false, nil
	}
	idx, err := s.store.UpsertNode(&cp)
	if err != nil {
		return nil, false, fmt.Errorf("failed to store node %s: %w", cp.ID, notLeader(err))
	}
	s.planGen.Add(1)
	cp.ModifyIndex = idx
	return &cp, true, nil
}

// evaluateJobs evaluates each job for a node change and returns the
// evaluations' IDs; a job that cannot be planned is logged (the next node
// change or drain check tries again).
func (s *Server) evaluateJobs(jobIDs []string, trigger, nodeID string) []string {
	ids := []string{}
	for _, id := range jobIDs {
		res, err := s.plan(&planRequest{jobID: id, trigger: trigger, prepare: liveJob})
		switch {
		case errors.Is(err, state.ErrNotFound): // stopped or purged meanwhile
		case err != nil:
			s.logger.Error("failed to evaluate job for node update", "job_id", id, "node_id", nodeID, "error", err)
		default:
			ids = append(ids, res.eval.ID)
		}
	}
	return ids
}

// liveJobIDs returns the IDs of the jobs that are not stopped, sorted; a
// store that cannot be read yields none (logged).
func (s *Server) liveJobIDs() []string {
	jobs, err := s.store.Jobs()
	if err != nil {
		s.logger.Error("failed to list jobs", "error", err)
		return nil
	}
	var ids []string
	for _, j := range jobs {
		if !j.Stop {
			ids = append(ids, j.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// jobsOnNode returns the jobs (sorted) of the allocations meant to run on
// the node that have not finished.
func (s *Server) jobsOnNode(nodeID string) ([]string, error) {
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	jobs := map[string]bool{}
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun && !a.TerminalStatus() {
			jobs[a.JobID] = true
		}
	}
	return slices.Sorted(maps.Keys(jobs)), nil
}

// drainDone reports whether nothing runs on the node any more: every
// allocation is terminal, or (on a down node, whose client is gone) at
// least meant to stop.
func drainDone(node *structs.Node, allocs []*structs.Allocation) bool {
	for _, a := range allocs {
		if a.TerminalStatus() {
			continue
		}
		if node.Status == structs.NodeStatusDown && a.DesiredStatus == structs.AllocDesiredStatusStop {
			continue
		}
		return false
	}
	return true
}

// checkDrain advances the node's drain: at its deadline the jobs still
// running there are evaluated (the scheduler stops them), and once
// nothing runs the drain completes. While the drain lasts the check is
// armed again.
func (s *Server) checkDrain(nodeID string) {
	s.mu.Lock()
	if t := s.timers[drainTimerPrefix+nodeID]; t != nil {
		t.Stop()
		delete(s.timers, drainTimerPrefix+nodeID)
	}
	stopped := s.shutdown
	s.mu.Unlock()
	if stopped || !s.IsLeader() {
		return
	}
	done, err := s.drainStep(nodeID)
	if err != nil {
		s.logger.Error("failed to check node drain", "node_id", nodeID, "error", err)
	}
	if !done {
		s.armDrainCheck(nodeID, drainCheckInterval)
	}
}

// drainStep is one check of checkDrain; done means the node is no longer
// draining (completed now, cancelled, or gone).
func (s *Server) drainStep(nodeID string) (bool, error) {
	node, err := s.store.Node(nodeID)
	if errors.Is(err, state.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to read node %s: %w", nodeID, err)
	}
	if !node.Draining() {
		return true, nil
	}
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		return false, fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	if !drainDone(node, allocs) {
		if ds := node.DrainStrategy; ds != nil && ds.Deadline > 0 && !s.now().Before(ds.ForceDeadline) {
			jobs, err := s.jobsOnNode(nodeID)
			if err != nil {
				return false, err
			}
			s.evaluateJobs(jobs, TriggerNodeDrain, nodeID)
		}
		return false, nil
	}
	_, changed, err := s.updateNode(nodeID, func(n *structs.Node) error {
		n.Drain, n.DrainStrategy = false, nil
		return nil
	})
	if err != nil {
		return false, err
	}
	if changed {
		s.logger.Info("node drain complete", "node_id", nodeID, "eligibility", node.SchedulingEligibility)
	}
	return true, nil
}

// armDrainCheck runs checkDrain for the node after d.
func (s *Server) armDrainCheck(nodeID string, d time.Duration) {
	key := drainTimerPrefix + nodeID
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown || s.timers[key] != nil {
		return
	}
	s.timers[key] = time.AfterFunc(d, func() { s.checkDrain(nodeID) })
}

// armDrainChecks re-arms the checks of every draining node; a new leader
// (and a restarted server) calls it with its other duties so that drains
// in progress complete.
func (s *Server) armDrainChecks() error {
	nodes, err := s.store.Nodes()
	if err != nil {
		return fmt.Errorf("failed to list nodes: %w", err)
	}
	for _, n := range nodes {
		if n.Draining() {
			s.armDrainCheck(n.ID, 0)
		}
	}
	return nil
}
