package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// RegisterResult is the outcome of RegisterJob.
type RegisterResult struct {
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Warnings        []string
}

// RegisterOptions are the conditions of a registration.
type RegisterOptions struct {
	// EnforceIndex registers only if the stored job's JobModifyIndex is
	// JobModifyIndex, or, when that is 0, only if no such job exists
	// (Nomad's `job run -check-index`), checked in the registration's own
	// transaction.
	EnforceIndex   bool
	JobModifyIndex uint64
	// PreserveCounts keeps the counts of the groups the stored job has.
	PreserveCounts bool
}

// EnforceIndexErrPrefix starts the error of a registration whose
// EnforceIndex condition failed: Nomad's text, which its CLI looks for.
const EnforceIndexErrPrefix = "Enforcing job modify index"

// RegisterJob registers job with no condition (see RegisterJobWith).
func (s *Server) RegisterJob(ctx context.Context, job *structs.Job) (*RegisterResult, error) {
	return s.RegisterJobWith(ctx, job, RegisterOptions{})
}

// checkEnforceIndex checks opts' condition against the stored job old.
func checkEnforceIndex(opts RegisterOptions, old *structs.Job) error {
	switch {
	case !opts.EnforceIndex:
		return nil
	case opts.JobModifyIndex == 0 && old != nil:
		return invalid(fmt.Errorf("%s 0: job already exists", EnforceIndexErrPrefix))
	case opts.JobModifyIndex != 0 && old == nil:
		return invalid(fmt.Errorf("%s %d: job does not exist", EnforceIndexErrPrefix, opts.JobModifyIndex))
	case opts.JobModifyIndex != 0 && old.JobModifyIndex != opts.JobModifyIndex:
		return invalid(fmt.Errorf("%s %d: job exists with conflicting job modify index: %d",
			EnforceIndexErrPrefix, opts.JobModifyIndex, old.JobModifyIndex))
	}
	return nil
}

// preserveCounts gives job's groups the counts they have in old.
func preserveCounts(job, old *structs.Job) {
	for _, tg := range job.TaskGroups {
		if was := old.LookupTaskGroup(tg.Name); was != nil {
			tg.Count = was.Count
		}
	}
}

// RegisterJobWith admits job (canonicalize → validate → mutators), stores
// it as a new version when its spec changed, and schedules it, if opts'
// condition holds. An invalid job, or a failed condition, returns an error
// wrapping ErrInvalid and stores nothing. The caller's job is not
// modified.
func (s *Server) RegisterJobWith(ctx context.Context, job *structs.Job, opts RegisterOptions) (*RegisterResult, error) {
	if job == nil {
		return nil, invalid(errors.New("missing job"))
	}
	cp, err := copyJob(job)
	if err != nil {
		return nil, invalid(err)
	}
	s.admission.Canonicalize(cp)
	warnings, err := s.admission.Validate(cp)
	if err != nil {
		return nil, invalid(err)
	}
	if cp.ID == "" {
		return nil, invalid(errors.New("job ID is required"))
	}
	for _, m := range s.mutators {
		w, err := m.Mutate(cp)
		if err != nil {
			return nil, invalid(fmt.Errorf("%s: %w", m.Name(), err))
		}
		warnings = append(warnings, w...)
	}

	if err := s.checkBounds(cp); err != nil {
		return nil, invalid(err)
	}
	cp.Stop = false
	cp.Status = ""
	cp.SubmitTime = s.now().UnixNano()
	cp.CreateIndex, cp.ModifyIndex, cp.JobModifyIndex = 0, 0, 0
	var changed bool
	res, err := s.plan(&planRequest{jobID: cp.ID, trigger: TriggerJobRegister, force: true,
		prepare: func(old *structs.Job) (*structs.Job, bool, error) {
			if err := checkEnforceIndex(opts, old); err != nil {
				return nil, false, err
			}
			if opts.PreserveCounts && old != nil {
				preserveCounts(cp, old)
			}
			changed = old == nil || !specEqual(old, cp)
			if !changed {
				return old, false, nil
			}
			next := *cp
			if old != nil {
				next.Version = old.Version + 1
			} else {
				next.Version = 0
			}
			return &next, true, nil
		}})
	if err != nil {
		return nil, err
	}
	s.logger.Info("registered job", "job_id", res.job.ID, "version", res.job.Version, "changed", changed,
		"eval_id", res.eval.ID)
	s.maybeGC()
	return &RegisterResult{EvalID: res.eval.ID, EvalCreateIndex: res.index, JobModifyIndex: res.job.JobModifyIndex,
		Warnings: warnings}, nil
}

// checkBounds rejects a job asking for more allocations or bytes than the
// configured limits, before any lock is taken or anything is expanded.
func (s *Server) checkBounds(job *structs.Job) error {
	total := 0
	for _, tg := range job.TaskGroups {
		if limit := s.cfg.MaxJobCount; limit > 0 && (tg.Count > limit || total+tg.Count > limit) {
			return fmt.Errorf("job %q asks for more than %d allocations (group %q count %d)", job.ID, limit, tg.Name, tg.Count)
		}
		total += max(tg.Count, 0)
	}
	buf, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("failed to encode job: %w", err)
	}
	if limit := s.cfg.MaxJobSize; limit > 0 && len(buf) > limit {
		return fmt.Errorf("job %q is %d bytes encoded, more than the limit of %d bytes", job.ID, len(buf), limit)
	}
	if limit := s.cfg.MaxPlanSize; limit > 0 && total > 0 && len(buf) > limit/total {
		return fmt.Errorf("job %q would store %d allocations of %d bytes each, more than the limit of %d bytes in all",
			job.ID, total, len(buf), limit)
	}
	return nil
}

// StopJob marks the job stopped (a new version) and stops its allocations,
// in one state transaction. With purge the job and its history are removed
// at once; its allocations are removed once their client reports them
// terminal.
func (s *Server) StopJob(ctx context.Context, id string, purge bool) (string, error) {
	res, err := s.plan(&planRequest{jobID: id, trigger: TriggerJobDeregister, purge: purge,
		prepare: func(old *structs.Job) (*structs.Job, bool, error) {
			if old == nil {
				return nil, false, fmt.Errorf("failed to find job %q: %w", id, state.ErrNotFound)
			}
			job := *old
			job.Stop = true
			if old.Stop || purge {
				return &job, false, nil
			}
			job.Version++
			job.SubmitTime = s.now().UnixNano()
			return &job, true, nil
		}})
	if err != nil {
		return "", err
	}
	s.logger.Info("stopped job", "job_id", id, "purge", purge, "eval_id", res.eval.ID)
	if purge {
		s.deletePurgedAllocs(id)
	}
	return res.eval.ID, nil
}

// deletePurgedAllocs removes a purged job's terminal allocations, after
// its purge's plan, in batches; a failure leaves them to garbage
// collection.
func (s *Server) deletePurgedAllocs(jobID string) {
	allocs, err := s.store.AllocsByJob(jobID)
	if err == nil {
		err = s.deleteGarbage(terminalAllocs(allocs, jobID), nil)
	}
	if err != nil {
		s.logger.Warn("failed to remove a purged job's allocations; garbage collection will", "job_id", jobID, "error", err)
	}
}

// Job returns a job with its status derived from its allocations.
func (s *Server) Job(ctx context.Context, id string) (*structs.Job, error) {
	job, err := s.store.Job(id)
	if err != nil {
		return nil, fmt.Errorf("failed to find job %q: %w", id, err)
	}
	allocs, err := s.store.AllocsByJob(id)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	job.Status = JobStatus(job, allocs)
	return job, nil
}

// Jobs returns every job sorted by ID, with derived statuses.
func (s *Server) Jobs(ctx context.Context) ([]*structs.Job, error) {
	jobs, err := s.store.Jobs()
	if err != nil {
		return nil, fmt.Errorf("failed to list jobs: %w", err)
	}
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	byJob := map[string][]*structs.Allocation{}
	for _, a := range allocs {
		byJob[a.JobID] = append(byJob[a.JobID], a)
	}
	for _, j := range jobs {
		j.Status = JobStatus(j, byJob[j.ID])
	}
	return jobs, nil
}

// JobVersions returns the job's versions, newest first.
func (s *Server) JobVersions(ctx context.Context, id string) ([]*structs.Job, error) {
	vs, err := s.store.JobVersions(id)
	if err != nil {
		return nil, fmt.Errorf("failed to find job %q: %w", id, err)
	}
	return vs, nil
}

// JobAllocs returns the job's allocations sorted by group and index. A
// purged job's allocations are returned until they are removed; a job that
// is neither stored nor has allocations is not found.
func (s *Server) JobAllocs(ctx context.Context, id string) ([]*structs.Allocation, error) {
	allocs, err := s.store.AllocsByJob(id)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	if len(allocs) == 0 {
		// No allocations: tell an unknown job (not found) from one with none.
		if _, err := s.store.Job(id); err != nil {
			return nil, fmt.Errorf("failed to find job %q: %w", id, err)
		}
	}
	SortAllocs(allocs)
	return allocs, nil
}

// JobEvals returns the job's evaluations, newest first.
func (s *Server) JobEvals(ctx context.Context, id string) ([]*state.Evaluation, error) {
	return s.store.EvalsByJob(id)
}

// Eval returns an evaluation by ID.
func (s *Server) Eval(ctx context.Context, id string) (*state.Evaluation, error) {
	e, err := s.store.Eval(id)
	if err != nil {
		return nil, fmt.Errorf("failed to find evaluation %q: %w", id, err)
	}
	return e, nil
}

// JobStatus derives a job's status: running while any allocation runs;
// else pending while any is pending or waits for its reschedule; else dead
// once the job is stopped or any of its allocations finished (batch and
// service jobs alike); else pending, as while placement is outstanding.
func JobStatus(job *structs.Job, allocs []*structs.Allocation) string {
	running, live, done := false, false, 0
	for _, a := range allocs {
		switch {
		case a.ClientStatus == structs.AllocClientStatusRunning:
			running = true
		case !a.TerminalStatus():
			live = true
		case a.FollowupEvalID != "" && a.NextAllocation == "" && a.DesiredStatus == structs.AllocDesiredStatusRun:
			live = true // failed, a replacement is scheduled
		case a.DesiredStatus == structs.AllocDesiredStatusRun:
			done++
		}
	}
	switch {
	case running:
		return structs.JobStatusRunning
	case live:
		return structs.JobStatusPending
	case job.Stop, done > 0:
		return structs.JobStatusDead
	}
	return structs.JobStatusPending
}

// SortAllocs orders allocations by job, group and index, then ID.
func SortAllocs(allocs []*structs.Allocation) {
	sort.SliceStable(allocs, func(i, j int) bool {
		a, b := allocs[i], allocs[j]
		switch {
		case a.JobID != b.JobID:
			return a.JobID < b.JobID
		case a.TaskGroup != b.TaskGroup:
			return a.TaskGroup < b.TaskGroup
		case a.Index() != b.Index():
			return a.Index() < b.Index()
		case a.CreateIndex != b.CreateIndex:
			return a.CreateIndex < b.CreateIndex
		}
		return a.ID < b.ID
	})
}

func copyJob(job *structs.Job) (*structs.Job, error) {
	buf, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("failed to encode job: %w", err)
	}
	out := new(structs.Job)
	if err := json.Unmarshal(buf, out); err != nil {
		return nil, fmt.Errorf("failed to decode job: %w", err)
	}
	return out, nil
}

// specEqual compares two jobs ignoring the fields the server manages.
func specEqual(a, b *structs.Job) bool {
	norm := func(j *structs.Job) string {
		cp := *j
		cp.Version, cp.CreateIndex, cp.ModifyIndex, cp.JobModifyIndex, cp.SubmitTime, cp.Status = 0, 0, 0, 0, 0, ""
		buf, _ := json.Marshal(&cp)
		return string(buf)
	}
	return norm(a) == norm(b)
}
