package server

import (
	"errors"
	"maps"
	"slices"

	"github.com/meshlet/meshlet/state"
)

// Placements that failed (no node had the room, the ports or the driver)
// are retried, as Nomad's blocked evaluations are, when a node changes
// (every live job is evaluated then) and when room frees up: the jobs
// whose latest plan left placements undone are remembered (blocked) and
// evaluated again whenever a client reports allocations finished. A new
// leader re-evaluates the jobs whose latest evaluation failed to place.

// TriggerQueuedAllocs is the trigger of an evaluation retrying placements
// once room freed up, as Nomad names its unblocked evaluations'.
const TriggerQueuedAllocs = "queued-allocs"

// trackBlocked records whether the job's latest plan left placements
// undone.
func (s *Server) trackBlocked(jobID string, blocked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if blocked {
		s.blocked[jobID] = true
	} else {
		delete(s.blocked, jobID)
	}
}

// unblock evaluates every job whose placements are waiting for room.
func (s *Server) unblock() {
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.blocked))
	s.mu.Unlock()
	for _, id := range ids {
		_, err := s.plan(&planRequest{jobID: id, trigger: TriggerQueuedAllocs, prepare: liveJob})
		switch {
		case errors.Is(err, state.ErrNotFound):
			s.trackBlocked(id, false) // stopped or purged meanwhile
		case err != nil:
			s.logger.Error("failed to retry blocked placements", "job_id", id, "error", err)
		}
	}
}

// blockedJobs returns the jobs whose latest decided evaluation (by modify
// index; pending follow-ups decide nothing yet) failed to place.
func blockedJobs(evals []*state.Evaluation) map[string]bool {
	latest := map[string]*state.Evaluation{}
	for _, e := range evals {
		if e.Status == state.EvalStatusPending {
			continue
		}
		if l := latest[e.JobID]; l == nil || e.ModifyIndex > l.ModifyIndex {
			latest[e.JobID] = e
		}
	}
	out := map[string]bool{}
	for id, e := range latest {
		if len(e.FailedTGAllocs) > 0 {
			out[id] = true
		}
	}
	return out
}
