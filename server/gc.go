package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// GC removes what the cluster no longer needs (job versions beyond the
// kept ones go at each job write):
//   - nodes down for NodeGCThreshold with no allocation left to run (a
//     client that comes back registers again);
//   - terminal allocations of purged jobs;
//   - terminal allocations that were stopped or replaced, once older than
//     AllocGCThreshold;
//   - evaluations of purged jobs, and finished evaluations older than
//     EvalGCThreshold except each job's latest.
//
// Pending follow-up evaluations and allocations still meant to run are
// never removed. What to remove is read without the plan lock (decoding
// every allocation must not stall registrations); the removal commits
// under it, in batches (deleteGarbage). What the reads saw stays garbage:
// a terminal allocation never runs again and a job's newer evaluations
// only make older ones older.
func (s *Server) GC() error {
	p, err := s.garbage()
	if err != nil {
		return err
	}
	var errs []error
	if err := s.deleteGarbage(p.DeleteAllocs, p.DeleteEvals); err != nil {
		errs = append(errs, fmt.Errorf("failed to collect garbage: %w", err))
	}
	if err := s.collectNodes(); err != nil { // not held up by a failed deletion
		errs = append(errs, fmt.Errorf("failed to collect nodes: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(p.DeleteAllocs)+len(p.DeleteEvals) > 0 {
		s.logger.Debug("collected garbage", "allocs", len(p.DeleteAllocs), "evals", len(p.DeleteEvals))
	}
	return nil
}

// defaultGCBatch is how many allocations and evaluations one garbage
// transaction removes at first; a transaction over the etcd server's
// limits (--max-txn-ops) is split in halves until it fits.
const defaultGCBatch = 256

// deleteGarbage removes allocations and evaluations that are garbage, in
// transactions of at most s.gcBatch removals, each under the plan lock (a
// large collection neither exceeds etcd's transaction limits nor stalls
// registrations). Removing garbage twice is harmless, so a failure part
// way leaves the rest for the next collection.
func (s *Server) deleteGarbage(allocs, evals []string) error {
	return s.applyInBatches(len(allocs)+len(evals), func(lo, hi int) *state.Plan {
		p := &state.Plan{}
		if lo < len(allocs) {
			p.DeleteAllocs = allocs[lo:min(hi, len(allocs))]
		}
		if hi > len(allocs) {
			p.DeleteEvals = evals[max(lo-len(allocs), 0) : hi-len(allocs)]
		}
		return p
	})
}

// applyInBatches commits the plans of items [lo, hi) of n, each under the
// plan lock, s.gcBatch items at first and half as many after a write over
// the etcd server's limits.
func (s *Server) applyInBatches(n int, plan func(lo, hi int) *state.Plan) error {
	batch := int(s.gcBatch.Load())
	for lo := 0; lo < n; {
		hi := min(lo+batch, n)
		err := s.applyLocked(plan(lo, hi))
		if errors.Is(err, state.ErrPlanTooLarge) && batch > 1 {
			batch /= 2
			continue
		}
		if err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// applyLocked commits p under the plan lock.
func (s *Server) applyLocked(p *state.Plan) error {
	s.planMu.Lock()
	defer s.planMu.Unlock()
	if _, err := s.store.ApplyPlan(p); err != nil {
		return err
	}
	s.planGen.Add(1)
	return nil
}

// garbage reads the state, without the plan lock, and returns the
// deletions of a collection.
func (s *Server) garbage() (*state.Plan, error) {
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	evals, err := s.store.Evals()
	if err != nil {
		return nil, fmt.Errorf("failed to list evaluations: %w", err)
	}
	// Jobs last: a job that allocations or evaluations read above belong
	// to is still listed unless it was purged since (a job and its first
	// evaluation commit together), so nothing of a live job counts as a
	// purged job's.
	jobs, err := s.store.Jobs()
	if err != nil {
		return nil, fmt.Errorf("failed to list jobs: %w", err)
	}
	live := map[string]bool{}
	for _, j := range jobs {
		live[j.ID] = true
	}
	now := s.now()
	return &state.Plan{DeleteAllocs: s.collectAllocs(allocs, live, now), DeleteEvals: s.collectEvals(evals, live, now)}, nil
}

func (s *Server) collectAllocs(allocs []*structs.Allocation, live map[string]bool, now time.Time) []string {
	var out []string
	for _, a := range allocs {
		if !a.TerminalStatus() {
			continue
		}
		old := now.Sub(time.Unix(0, a.ModifyTime)) >= s.cfg.AllocGCThreshold
		replaced := a.DesiredStatus == structs.AllocDesiredStatusStop || a.NextAllocation != ""
		if !live[a.JobID] || (replaced && old) {
			out = append(out, a.ID)
		}
	}
	return out
}

func (s *Server) collectEvals(evals []*state.Evaluation, live map[string]bool, now time.Time) []string {
	latest := map[string]*state.Evaluation{}
	for _, e := range evals {
		if l := latest[e.JobID]; l == nil || e.CreateIndex > l.CreateIndex {
			latest[e.JobID] = e
		}
	}
	var out []string
	for _, e := range evals {
		old := now.Sub(time.Unix(0, e.ModifyTime)) >= s.cfg.EvalGCThreshold
		switch {
		case !live[e.JobID]:
			// A purged job's evaluations go once old, as Nomad's: the
			// purge's own stays readable for whoever monitors it.
			if old {
				out = append(out, e.ID)
			}
		case e.Status == state.EvalStatusPending, latest[e.JobID] == e:
		case old:
			out = append(out, e.ID)
		}
	}
	return out
}

// maybeGC collects garbage when GCInterval passed since the last time.
func (s *Server) maybeGC() {
	s.mu.Lock()
	now := s.now()
	due := now.Sub(s.lastGC) >= s.cfg.GCInterval
	if due {
		s.lastGC = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if err := s.GC(); err != nil {
		s.logger.Error("failed to collect garbage", "error", err)
	}
}

// collectNodes removes the nodes down for NodeGCThreshold (by their
// StatusUpdatedAt; one without is kept) whose allocations are all
// terminal, as Nomad's node GC does.
func (s *Server) collectNodes() error {
	nodes, err := s.store.Nodes()
	if err != nil {
		return fmt.Errorf("failed to list nodes: %w", err)
	}
	now := s.now()
	for _, n := range nodes {
		if n.Status != structs.NodeStatusDown || n.StatusUpdatedAt == 0 ||
			now.Sub(time.Unix(n.StatusUpdatedAt, 0)) < s.cfg.NodeGCThreshold {
			continue
		}
		if err := s.collectNode(n); err != nil {
			return err
		}
	}
	return nil
}

// collectNode removes node n, still as read, when none of its
// allocations may run.
func (s *Server) collectNode(n *structs.Node) error {
	s.planMu.Lock()
	defer s.planMu.Unlock()
	cur, err := s.store.Node(n.ID)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read node %s: %w", n.ID, err)
	}
	if cur.ModifyIndex != n.ModifyIndex {
		return nil // it came back (or changed) meanwhile
	}
	allocs, err := s.store.AllocsByNode(n.ID)
	if err != nil {
		return fmt.Errorf("failed to list allocations of node %s: %w", n.ID, err)
	}
	for _, a := range allocs {
		if !a.TerminalStatus() {
			return nil
		}
	}
	if _, err := s.store.DeleteNode(n.ID); err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("failed to remove node %s: %w", n.ID, err)
	}
	s.planGen.Add(1)
	s.mu.Lock()
	delete(s.nodeAllocCount, n.ID)
	s.mu.Unlock()
	s.logger.Info("removed a node down past node_gc_threshold", "node_id", n.ID, "node_name", n.Name)
	return nil
}
