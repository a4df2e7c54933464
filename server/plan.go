package server

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Plans follow Nomad's plan applier: the scheduler computes a plan from a
// snapshot of the state WITHOUT the plan lock (a large job never stalls
// other registrations), then the plan is committed under planMu in one
// state transaction if nothing that placement depends on was committed
// meanwhile (planGen unchanged); otherwise it is computed again. After
// optimisticAttempts conflicts the plan is computed under the lock, so a
// busy server still makes progress.
const optimisticAttempts = 2

// Evaluation trigger of a failed allocation's replacement, as Nomad names it.
const TriggerAllocFailure = "alloc-failure"

// followUpWindow batches the follow-ups of allocations failing together
// into one evaluation (Nomad batches within 5 s).
const followUpWindow = 5 * time.Second

// planRequest says which job to evaluate and how.
type planRequest struct {
	jobID   string
	trigger string
	// prepare returns the job to plan given the stored one (nil when there
	// is none) and whether it is a new version to store with the plan.
	prepare func(stored *structs.Job) (job *structs.Job, store bool, err error)
	// purge removes the job, its versions and evaluations with the plan.
	purge bool
	// followUp is the pending follow-up evaluation this run completes.
	followUp *state.Evaluation
	// force replaces failed allocations now (the job was submitted again).
	force bool
}

// builtPlan is a computed plan ready to commit.
type builtPlan struct {
	job       *structs.Job
	stored    bool
	eval      *state.Evaluation
	followUps []*state.Evaluation
	apply     *state.Plan
}

// planResult is what a committed plan produced.
type planResult struct {
	job   *structs.Job
	eval  *state.Evaluation
	index uint64
}

// storedJob returns the stored job unchanged (the prepare of evaluations
// that do not write the job); a missing job is ErrNotFound.
func storedJob(stored *structs.Job) (*structs.Job, bool, error) {
	if stored == nil {
		return nil, false, state.ErrNotFound
	}
	return stored, false, nil
}

// plan computes and commits the plan of req (see optimisticAttempts).
func (s *Server) plan(req *planRequest) (*planResult, error) {
	if err := s.requireLeader(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		locked := attempt >= optimisticAttempts
		if locked {
			s.planMu.Lock()
		}
		gen := s.planGen.Load()
		b, err := s.build(req)
		if !locked {
			if err != nil {
				return nil, err
			}
			s.planMu.Lock()
		}
		if err == nil && s.planGen.Load() != gen {
			s.planMu.Unlock()
			continue
		}
		var res *planResult
		if err == nil {
			testPauseBeforeCommit(s.logger)
			res, err = s.commit(b)
		}
		s.planMu.Unlock()
		return res, err
	}
}

// build reads the state and runs the scheduler; it writes nothing.
func (s *Server) build(req *planRequest) (*builtPlan, error) {
	stored, err := s.store.Job(req.jobID)
	if errors.Is(err, state.ErrNotFound) {
		stored = nil
	} else if err != nil {
		return nil, fmt.Errorf("failed to read job %s: %w", req.jobID, err)
	}
	job, store, err := req.prepare(stored)
	if err != nil {
		return nil, err
	}
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	nodes, err := s.store.Nodes()
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	now := s.now()
	opts := scheduler.Options{Now: now, ForceReschedule: req.force}
	if req.followUp != nil && req.followUp.WaitUntil > now.UnixNano() {
		opts.Now = time.Unix(0, req.followUp.WaitUntil) // a timer may fire a little early
	}
	p, err := s.sched.Process(job, allocs, nodes, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to schedule job %s: %w", job.ID, err)
	}
	b := &builtPlan{job: job, stored: store, eval: s.newEval(job, req, now), apply: &state.Plan{}}
	if store {
		b.apply.Job = job
	}
	s.planWrites(b, p, now)
	if req.purge {
		// Its terminal allocations go after the plan, in batches
		// (StopJob), so a large purge fits etcd's transaction limits.
		b.apply.PurgeJobID = job.ID
	}
	return b, nil
}

// newEval returns the evaluation recording this run (the follow-up's own
// when it completes one).
func (s *Server) newEval(job *structs.Job, req *planRequest, now time.Time) *state.Evaluation {
	ns := now.UnixNano()
	e := &state.Evaluation{ID: uuid.NewString(), Namespace: job.Namespace, Priority: job.Priority, Type: job.Type,
		TriggeredBy: req.trigger, JobID: job.ID, Status: state.EvalStatusComplete, CreateTime: ns}
	if req.followUp != nil {
		cp := *req.followUp
		e = &cp
		e.Status = state.EvalStatusComplete
	}
	e.JobModifyIndex = job.JobModifyIndex
	e.ModifyTime = ns
	return e
}

// planWrites turns the scheduler's plan into state writes: allocations,
// the evaluation (with its failures) and follow-up evaluations.
func (s *Server) planWrites(b *builtPlan, p *scheduler.Plan, now time.Time) {
	ns := now.UnixNano()
	for _, a := range p.Place {
		a.EvalID = b.eval.ID
		b.apply.Allocs = append(b.apply.Allocs, a)
	}
	for _, a := range append(p.Stop, p.Update...) {
		a.ModifyTime = ns
		b.apply.Allocs = append(b.apply.Allocs, a)
	}
	if len(p.Failures) > 0 {
		b.eval.FailedTGAllocs = map[string]*state.AllocMetric{}
		var msgs []string
		for _, f := range p.Failures {
			b.eval.FailedTGAllocs[f.Group] = &state.AllocMetric{NodesEvaluated: f.NodesEvaluated,
				NodesFiltered: sum(f.Filtered), NodesExhausted: sum(f.Exhausted), ConstraintFiltered: f.Filtered,
				DimensionExhausted: f.Exhausted, CoalescedFailures: f.Count - 1}
			msgs = append(msgs, fmt.Sprintf("group %q: %s", f.Group, strings.Join(f.Reasons(), "; ")))
		}
		b.eval.StatusDescription = "placement failed: " + strings.Join(msgs, "; ")
	}
	b.apply.Evals = append(b.apply.Evals, b.eval)
	sort.Slice(p.FollowUps, func(i, j int) bool { return p.FollowUps[i].WaitUntil.Before(p.FollowUps[j].WaitUntil) })
	var cur *state.Evaluation
	var start time.Time
	for _, f := range p.FollowUps {
		if cur == nil || f.WaitUntil.Sub(start) > followUpWindow {
			start = f.WaitUntil
			cur = &state.Evaluation{ID: uuid.NewString(), Namespace: b.job.Namespace, Priority: b.job.Priority,
				Type: b.job.Type, TriggeredBy: TriggerAllocFailure, JobID: b.job.ID, Status: state.EvalStatusPending,
				JobModifyIndex: b.job.JobModifyIndex, PreviousEval: b.eval.ID, CreateTime: ns, ModifyTime: ns}
			b.followUps = append(b.followUps, cur)
			b.apply.Evals = append(b.apply.Evals, cur)
		}
		cur.WaitUntil = f.WaitUntil.UnixNano()
		cur.StatusDescription = fmt.Sprintf("created for delayed rescheduling of failed allocations until %s",
			f.WaitUntil.UTC().Format(time.RFC3339))
		cp := *f.Alloc
		cp.FollowupEvalID = cur.ID
		b.apply.Allocs = append(b.apply.Allocs, &cp)
	}
}

// commit applies a built plan in one transaction. Callers hold planMu.
func (s *Server) commit(b *builtPlan) (*planResult, error) {
	index, err := s.store.ApplyPlan(b.apply)
	if err != nil {
		return nil, fmt.Errorf("failed to apply plan for job %s: %w", b.job.ID, notLeader(err))
	}
	s.planGen.Add(1)
	job := b.job
	if b.stored {
		cp := *job
		cp.CreateIndex, cp.ModifyIndex, cp.JobModifyIndex = 0, index, index
		if old, err := s.store.Job(job.ID); err == nil {
			cp = *old
		}
		job = &cp
		b.eval.JobModifyIndex = job.JobModifyIndex
	}
	if b.eval.FailedTGAllocs != nil {
		s.logger.Warn("placement failed", "job_id", job.ID, "eval_id", b.eval.ID, "reason", b.eval.StatusDescription)
	}
	s.trackBlocked(job.ID, b.eval.FailedTGAllocs != nil && !job.Stop)
	for _, f := range b.followUps {
		s.armFollowUp(f)
	}
	s.logger.Debug("evaluated job", "job_id", job.ID, "eval_id", b.eval.ID, "trigger", b.eval.TriggeredBy,
		"allocs", len(b.apply.Allocs), "follow_ups", len(b.followUps))
	return &planResult{job: job, eval: b.eval, index: index}, nil
}

// terminalAllocs returns the IDs of the job's allocations that are terminal.
func terminalAllocs(allocs []*structs.Allocation, jobID string) []string {
	var out []string
	for _, a := range allocs {
		if a.JobID == jobID && a.TerminalStatus() {
			out = append(out, a.ID)
		}
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
