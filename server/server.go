// Package server is meshlet's server role: it admits jobs (canonicalize,
// validate, mutate), keeps their versions, runs the scheduler on every job
// change and persists the resulting plans, and serves clients their
// allocations through a narrow RPC-shaped surface (RegisterNode,
// NodeAllocs, UpdateAllocs) so that a network can later sit between the two
// roles.
//
// Concurrency: every write that runs the scheduler (register, stop, node
// changes) holds one mutex, so plans are computed and persisted one at a
// time and never hand out the same port twice. Reads go straight to the
// state store and run concurrently.
package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Sentinel errors; the agent maps them onto the API's.
var (
	// ErrInvalid: the request was rejected and nothing was stored.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: unknown job, allocation, node or evaluation.
	ErrNotFound = state.ErrNotFound
	// ErrAmbiguousPrefix: an ID prefix matched several objects.
	ErrAmbiguousPrefix = errors.New("ambiguous ID prefix")
)

// invalidError marks err as ErrInvalid while keeping its message.
type invalidError struct{ err error }

func (e *invalidError) Error() string   { return e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{e.err, ErrInvalid} }

func invalid(err error) error { return &invalidError{err: err} }

// Evaluation trigger reasons, as Nomad names them.
const (
	TriggerJobRegister   = "job-register"
	TriggerJobDeregister = "job-deregister"
	TriggerNodeUpdate    = "node-update"
)

// Admission canonicalizes and validates submitted jobs; the agent wires the
// jobspecs package into it.
type Admission interface {
	// Canonicalize fills defaults in place; it must be idempotent.
	Canonicalize(job *structs.Job)
	// Validate returns warnings, or an error listing every problem.
	Validate(job *structs.Job) (warnings []string, err error)
}

// AdmissionFuncs adapts two functions to Admission.
type AdmissionFuncs struct {
	CanonicalizeFunc func(job *structs.Job)
	ValidateFunc     func(job *structs.Job) ([]string, error)
}

// Canonicalize implements Admission.
func (a AdmissionFuncs) Canonicalize(job *structs.Job) {
	if a.CanonicalizeFunc != nil {
		a.CanonicalizeFunc(job)
	}
}

// Validate implements Admission.
func (a AdmissionFuncs) Validate(job *structs.Job) ([]string, error) {
	if a.ValidateFunc == nil {
		return nil, nil
	}
	return a.ValidateFunc(job)
}

// JobMutator changes a job at registration, after it was canonicalized and
// validated and before it is stored — the seam where connect sidecar tasks
// are injected (like Nomad's job admission hooks). Mutate must be
// idempotent (a re-registered job passes through it again); an error
// rejects the registration and nothing is stored.
type JobMutator interface {
	Name() string
	Mutate(job *structs.Job) (warnings []string, err error)
}

// Config configures a Server.
type Config struct {
	Store     state.Store
	Scheduler scheduler.Scheduler
	Admission Admission
	Mutators  []JobMutator
	Logger    hclog.Logger
	// Now stamps jobs and evaluations; nil = time.Now.
	Now func() time.Time
}

// Server is the server role.
type Server struct {
	store     state.Store
	sched     scheduler.Scheduler
	admission Admission
	mutators  []JobMutator
	logger    hclog.Logger
	now       func() time.Time

	// planMu serializes every scheduler run and its persistence.
	planMu sync.Mutex
}

// New returns a Server over cfg.Store.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Scheduler == nil {
		return nil, fmt.Errorf("failed to create server: store and scheduler are required")
	}
	if cfg.Admission == nil {
		cfg.Admission = AdmissionFuncs{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{store: cfg.Store, sched: cfg.Scheduler, admission: cfg.Admission, mutators: cfg.Mutators,
		logger: cfg.Logger, now: cfg.Now}, nil
}

// Index is the state store's latest index.
func (s *Server) Index() uint64 { return s.store.Index() }

// WaitIndex blocks until the index passes minIndex or ctx ends.
func (s *Server) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	return s.store.WaitIndex(ctx, minIndex)
}

// evaluate runs the scheduler for job and persists the plan and an
// evaluation. Callers hold planMu.
func (s *Server) evaluate(job *structs.Job, trigger string) (*state.Evaluation, error) {
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	nodes, err := s.store.Nodes()
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	plan, err := s.sched.Process(job, allocs, nodes)
	if err != nil {
		return nil, fmt.Errorf("failed to schedule job %s: %w", job.ID, err)
	}
	now := s.now().UnixNano()
	eval := &state.Evaluation{ID: uuid.NewString(), Namespace: job.Namespace, Priority: job.Priority, Type: job.Type,
		TriggeredBy: trigger, JobID: job.ID, JobModifyIndex: job.JobModifyIndex, Status: state.EvalStatusComplete,
		CreateTime: now, ModifyTime: now}
	var writes []*structs.Allocation
	for _, a := range plan.Place {
		a.EvalID = eval.ID
		writes = append(writes, a)
	}
	for _, a := range append(plan.Stop, plan.Update...) {
		a.ModifyTime = now
		writes = append(writes, a)
	}
	if len(writes) > 0 {
		if _, err := s.store.UpsertAllocs(writes); err != nil {
			return nil, fmt.Errorf("failed to persist plan for job %s: %w", job.ID, err)
		}
	}
	if len(plan.Failures) > 0 {
		eval.FailedTGAllocs = map[string]*state.AllocMetric{}
		var msgs []string
		for _, f := range plan.Failures {
			eval.FailedTGAllocs[f.Group] = &state.AllocMetric{NodesEvaluated: f.NodesEvaluated,
				NodesFiltered: sum(f.Filtered), NodesExhausted: sum(f.Exhausted), ConstraintFiltered: f.Filtered,
				DimensionExhausted: f.Exhausted, CoalescedFailures: f.Count - 1}
			msgs = append(msgs, fmt.Sprintf("group %q: %s", f.Group, strings.Join(f.Reasons(), "; ")))
		}
		eval.StatusDescription = "placement failed: " + strings.Join(msgs, "; ")
		s.logger.Warn("placement failed", "job_id", job.ID, "eval_id", eval.ID, "reason", eval.StatusDescription)
	}
	if _, err := s.store.UpsertEval(eval); err != nil {
		return nil, fmt.Errorf("failed to persist evaluation: %w", err)
	}
	s.logger.Debug("evaluated job", "job_id", job.ID, "eval_id", eval.ID, "trigger", trigger,
		"place", len(plan.Place), "stop", len(plan.Stop), "update", len(plan.Update))
	return eval, nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// lookupPrefix resolves an exact ID or a unique prefix among ids.
func lookupPrefix(ids []string, prefix string) (string, error) {
	var match []string
	for _, id := range ids {
		if id == prefix {
			return id, nil
		}
		if strings.HasPrefix(id, prefix) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("%q: %w", prefix, ErrNotFound)
	case 1:
		return match[0], nil
	}
	sort.Strings(match)
	return "", fmt.Errorf("%q matches %d objects (%s): %w", prefix, len(match), strings.Join(match, ", "), ErrAmbiguousPrefix)
}
