package server

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/meshlet/meshlet/state"
)

// Delayed reschedules are persisted as pending follow-up evaluations
// (Status pending, WaitUntil) named by the failed allocation's
// FollowupEvalID, as Nomad does; a timer per evaluation runs it when due,
// and New re-arms the timers of those a restart found pending.

// followUpRetry is the delay before a follow-up whose plan failed to
// commit runs again.
const followUpRetry = 30 * time.Second

// armFollowUp runs the pending evaluation e when its WaitUntil comes.
func (s *Server) armFollowUp(e *state.Evaluation) {
	s.armAfter(e.ID, time.Unix(0, e.WaitUntil).Sub(s.now()))
}

func (s *Server) armAfter(id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown || s.timers[id] != nil {
		return
	}
	s.timers[id] = time.AfterFunc(max(d, 0), func() { s.runFollowUp(id) })
}

// runFollowUp evaluates the follow-up's job; a job stopped or purged
// meanwhile cancels it.
func (s *Server) runFollowUp(id string) {
	s.mu.Lock()
	delete(s.timers, id)
	stopped := s.shutdown
	s.mu.Unlock()
	if stopped {
		return
	}
	e, err := s.store.Eval(id)
	if err != nil || e.Status != state.EvalStatusPending {
		return // collected with its job, or already run
	}
	_, err = s.plan(&planRequest{jobID: e.JobID, trigger: e.TriggeredBy, followUp: e, prepare: liveJob})
	switch {
	case errors.Is(err, state.ErrNotFound):
		e.Status, e.StatusDescription, e.ModifyTime = state.EvalStatusCanceled, "job stopped or purged", s.now().UnixNano()
		if _, err := s.store.UpsertEval(e); err != nil {
			s.logger.Error("failed to cancel follow-up evaluation", "eval_id", id, "error", err)
		}
	case errors.Is(err, state.ErrClosed):
		// Shutting down without Shutdown: the next start re-arms it.
	case err != nil:
		s.logger.Error("failed to run follow-up evaluation", "eval_id", id, "job_id", e.JobID, "error", err)
		s.armAfter(id, followUpRetry)
	}
}

// recoverState is the start-up pass (belt and braces over the single-
// transaction plans): it evaluates every job whose latest version no
// evaluation planned, every live job with failed allocations nobody
// decided about and every live job whose latest evaluation failed to
// place (room may have freed up meanwhile), then re-arms the pending
// follow-up evaluations. Only a
// state that cannot be read fails it; a plan that cannot be written is
// logged and retried at the next start.
func (s *Server) recoverState() error {
	jobs, err := s.store.Jobs()
	if err != nil {
		return fmt.Errorf("failed to list jobs: %w", err)
	}
	evals, err := s.store.Evals()
	if err != nil {
		return fmt.Errorf("failed to list evaluations: %w", err)
	}
	allocs, err := s.store.Allocs()
	if err != nil {
		return fmt.Errorf("failed to list allocations: %w", err)
	}
	planned := map[string]uint64{}
	var pending []*state.Evaluation
	for _, e := range evals {
		planned[e.JobID] = max(planned[e.JobID], e.JobModifyIndex)
		if e.Status == state.EvalStatusPending {
			pending = append(pending, e)
		}
	}
	blocked := blockedJobs(evals)
	failed := map[string]bool{}
	for _, a := range allocs {
		if a.NeedsReschedule() && a.FollowupEvalID == "" {
			failed[a.JobID] = true
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	for _, j := range jobs {
		trigger := TriggerJobRegister
		switch {
		case j.Stop && planned[j.ID] < j.JobModifyIndex:
			trigger = TriggerJobDeregister
		case planned[j.ID] < j.JobModifyIndex:
		case failed[j.ID] && !j.Stop:
			trigger = TriggerAllocFailure
		case blocked[j.ID] && !j.Stop:
			trigger = TriggerQueuedAllocs
		default:
			continue
		}
		s.logger.Info("evaluating job at start", "job_id", j.ID, "version", j.Version, "trigger", trigger)
		if _, err := s.plan(&planRequest{jobID: j.ID, trigger: trigger, prepare: storedJob}); err != nil {
			// A full disk must not keep the server (and what runs) from
			// starting: the job stays as it was and the next start retries.
			s.logger.Error("failed to evaluate job at start", "job_id", j.ID, "error", err)
		}
	}
	for _, e := range pending {
		s.armFollowUp(e)
	}
	return nil
}
