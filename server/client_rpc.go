package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// This file is the client-facing surface of the server: the client role
// reaches the server only through these calls (see client.ServerConn).

// RegisterNode stores (or refreshes) a client node. When the node is new or
// its drivers, attributes or status changed, every job that is not stopped
// is re-evaluated so that placements blocked on this node are retried. A
// plan that cannot be written (a full disk) is logged, not returned: the
// node is registered, and failing here would keep the client (and what it
// runs) from starting.
func (s *Server) RegisterNode(ctx context.Context, node *structs.Node) error {
	if node == nil || node.ID == "" {
		return invalid(errors.New("node ID is required"))
	}
	if err := s.requireLeader(); err != nil {
		return err
	}
	cp := *node
	if cp.Status == "" {
		cp.Status = structs.NodeStatusReady
	}
	s.armHeartbeat(cp.ID, s.heartbeatTTL()+s.cfg.HeartbeatGrace)
	return s.nodeChanged(&cp, "registered")
}

// storeNode writes the node under the plan lock when it changed.
func (s *Server) storeNode(node *structs.Node) (bool, error) {
	s.planMu.Lock()
	defer s.planMu.Unlock()
	old, err := s.store.Node(node.ID)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return false, fmt.Errorf("failed to read node %s: %w", node.ID, err)
	}
	if old != nil {
		// Operators' decisions (eligibility, drain) are the server's:
		// clients and heartbeats never change them.
		node.SchedulingEligibility, node.Drain, node.DrainStrategy = old.SchedulingEligibility, old.Drain, old.DrainStrategy
		node.StatusUpdatedAt = old.StatusUpdatedAt
	}
	if old == nil || old.Status != node.Status {
		node.StatusUpdatedAt = s.now().Unix()
	}
	if old != nil && nodeEqual(old, node) {
		return false, nil
	}
	if _, err := s.store.UpsertNode(node); err != nil {
		return false, fmt.Errorf("failed to store node %s: %w", node.ID, err)
	}
	s.planGen.Add(1)
	return true, nil
}

func nodeEqual(a, b *structs.Node) bool {
	x, y := *a, *b
	x.CreateIndex, x.ModifyIndex, y.CreateIndex, y.ModifyIndex = 0, 0, 0, 0
	for _, n := range []*structs.Node{&x, &y} {
		drivers := map[string]*structs.DriverInfo{}
		for k, v := range n.Drivers {
			d := *v
			d.UpdateTime = time.Time{} // refresh times are not part of identity
			drivers[k] = &d
		}
		n.Drivers = drivers
	}
	xb, _ := json.Marshal(&x)
	yb, _ := json.Marshal(&y)
	return string(xb) == string(yb)
}

// NodeAllocs blocks until the server changed one of the node's
// allocations after minIndex (placed, stopped, updated: AllocModifyIndex),
// one turned terminal or one was removed (or ctx ends), and returns every
// allocation placed on the node with the state index it reflects. Changes
// to other nodes' allocations and running status reports do not wake it: with many nodes, every plan and
// every status report would otherwise send every node its whole list
// again. Clients act on allocations whose AllocModifyIndex they have not
// seen.
func (s *Server) NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error) {
	for {
		idx := s.store.WaitIndex(ctx, minIndex)
		if minIndex != 0 && ctx.Err() == nil && s.nodeAllocsQuiet(nodeID, minIndex) {
			minIndex = idx
			continue
		}
		allocs, err := s.store.AllocsByNode(nodeID)
		if err != nil {
			return nil, 0, fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
		}
		// nodeAllocsChanged also records the node's count, even for the
		// first fetch (minIndex 0), which always answers.
		if changed := s.nodeAllocsChanged(nodeID, allocs, minIndex); minIndex == 0 || ctx.Err() != nil || changed {
			return allocs, idx, nil
		}
		minIndex = idx
	}
}

// AllocsOnNode returns the node's allocations now (rpc.Backend): a read
// for the servers' own checks that, unlike NodeAllocs, leaves the count
// the node's fetches compare against alone.
func (s *Server) AllocsOnNode(_ context.Context, nodeID string) ([]*structs.Allocation, error) {
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	return allocs, nil
}

// nodeAllocsQuiet reports whether the store's node index shows nothing for
// the node to act on after minIndex: clients' status updates wake every
// blocked fetch, and decoding all of a node's allocations for each of them
// made a node's start of n allocations cost O(n²) decodes. Unknown (the
// store cannot tell, or an error) is not quiet: the caller decodes.
func (s *Server) nodeAllocsQuiet(nodeID string, minIndex uint64) bool {
	ix, ok := s.store.(state.NodeAllocsIndexer)
	if !ok {
		return false
	}
	index, count, ok, err := ix.NodeAllocsIndex(nodeID)
	if err != nil || !ok || index > minIndex {
		return false
	}
	s.mu.Lock()
	last, known := s.nodeAllocCount[nodeID]
	s.mu.Unlock()
	return known && count >= last
}

// nodeAllocsChanged reports whether the server changed or removed one of
// the node's allocations after minIndex, and remembers how many the node
// has (a removal shows as fewer).
func (s *Server) nodeAllocsChanged(nodeID string, allocs []*structs.Allocation, minIndex uint64) bool {
	s.mu.Lock()
	last, known := s.nodeAllocCount[nodeID]
	s.nodeAllocCount[nodeID] = len(allocs)
	s.mu.Unlock()
	if !known || len(allocs) < last {
		return true
	}
	for _, a := range allocs {
		// A server-side change, or the allocation turned terminal (the
		// client collects what the server holds terminal).
		if a.AllocModifyIndex > minIndex || (a.ModifyIndex > minIndex && a.TerminalStatus()) {
			return true
		}
	}
	return false
}

// UpdateAllocs records what a client reports about its allocations
// (ClientStatus, TaskStates, NetworkStatus), removes allocations of purged
// jobs once they are terminal, and evaluates the jobs of allocations that
// failed so that they are rescheduled.
func (s *Server) UpdateAllocs(ctx context.Context, updates []*structs.Allocation) error {
	if len(updates) == 0 {
		return nil
	}
	now := s.now().UnixNano()
	stamped := make([]*structs.Allocation, 0, len(updates))
	var terminal []string
	for _, u := range updates {
		cp := *u
		if cp.ModifyTime == 0 {
			cp.ModifyTime = now
		}
		stamped = append(stamped, &cp)
		if cp.TerminalStatus() {
			terminal = append(terminal, cp.ID)
		}
	}
	if _, err := s.store.UpdateAllocsFromClient(stamped); err != nil {
		return fmt.Errorf("failed to update allocations: %w", err)
	}
	if len(terminal) == 0 {
		return nil
	}
	// Room freed: a plan computed before this write that found none must
	// be computed again, or unblock below could miss its job.
	s.planGen.Add(1)
	failedJobs, err := s.collectPurged(terminal)
	if err != nil {
		return err
	}
	for _, id := range failedJobs {
		if _, err := s.plan(&planRequest{jobID: id, trigger: TriggerAllocFailure, prepare: liveJob}); err != nil &&
			!errors.Is(err, state.ErrNotFound) {
			// The status is stored; the restart pass retries the reschedule.
			s.logger.Error("failed to evaluate failed allocations", "job_id", id, "error", err)
		}
	}
	s.unblock() // what finished freed room
	s.maybeGC()
	return nil
}

// liveJob prepares an evaluation of a stored job that is not stopped.
func liveJob(stored *structs.Job) (*structs.Job, bool, error) {
	if stored == nil || stored.Stop {
		return nil, false, state.ErrNotFound
	}
	return stored, false, nil
}

// collectPurged deletes, under the plan lock, the terminal allocations
// among ids whose job was purged, and returns the jobs (sorted) whose
// failed allocations need a reschedule decision.
func (s *Server) collectPurged(ids []string) ([]string, error) {
	s.planMu.Lock()
	defer s.planMu.Unlock()
	var dead []string
	jobs, failed := map[string]*structs.Job{}, map[string]bool{}
	for _, id := range ids {
		a, err := s.store.Alloc(id)
		if err != nil {
			continue // unknown or deleted meanwhile
		}
		job, ok := jobs[a.JobID]
		if !ok {
			job, _ = s.store.Job(a.JobID)
			jobs[a.JobID] = job
		}
		switch {
		case job == nil:
			dead = append(dead, a.ID)
		case !job.Stop && a.NeedsReschedule() && a.FollowupEvalID == "":
			failed[a.JobID] = true
		}
	}
	if len(dead) > 0 {
		if _, err := s.store.ApplyPlan(&state.Plan{DeleteAllocs: dead}); err != nil {
			return nil, fmt.Errorf("failed to delete allocations: %w", err)
		}
		s.planGen.Add(1)
		s.logger.Debug("removed allocations of purged jobs", "count", len(dead))
	}
	return slices.Sorted(maps.Keys(failed)), nil
}
