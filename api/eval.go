package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Evaluation statuses, as in Nomad.
const (
	EvalStatusPending  = "pending"
	EvalStatusComplete = "complete"
	EvalStatusFailed   = "failed"
	EvalStatusBlocked  = "blocked"
	EvalStatusCanceled = "canceled"
)

// Evaluation is one scheduling pass over a job, in Nomad's /v1 shape
// (subset). FailedTGAllocs carries placement failures per task group.
type Evaluation struct {
	ID                string
	Namespace         string
	Priority          int
	Type              string
	TriggeredBy       string
	JobID             string
	JobModifyIndex    uint64
	NodeID            string
	Status            string
	StatusDescription string
	BlockedEval       string
	// PreviousEval is the evaluation that created this follow-up one;
	// WaitUntil when a delayed (reschedule) evaluation runs.
	PreviousEval      string
	WaitUntil         time.Time
	FailedTGAllocs    map[string]*AllocationMetric `json:",omitempty"`
	QueuedAllocations map[string]int               `json:",omitempty"`
	CreateIndex       uint64
	ModifyIndex       uint64
	CreateTime        int64
	ModifyTime        int64
}

// AllocationMetric explains why a task group could not be placed. meshlet
// puts human-readable reasons in the map keys, e.g.
// ConstraintFiltered["driver docker not available on node dev-1"] = 1, or
// DimensionExhausted["port 9002 already in use by allocation 1234 (job x)"] = 1.
type AllocationMetric struct {
	NodesEvaluated     int
	NodesFiltered      int
	NodesAvailable     map[string]int `json:",omitempty"`
	ClassFiltered      map[string]int `json:",omitempty"`
	ConstraintFiltered map[string]int `json:",omitempty"`
	NodesExhausted     int
	ClassExhausted     map[string]int `json:",omitempty"`
	DimensionExhausted map[string]int `json:",omitempty"`
	CoalescedFailures  int
}

// EvaluationBackend is optionally implemented by a Backend that records
// evaluations. Without it the server answers /v1/evaluation/:id with a
// minimal "complete" evaluation for the evaluation IDs it handed out itself,
// so that clients which follow an evaluation still work; placement failures
// then surface only through allocations.
type EvaluationBackend interface {
	GetEvaluation(ctx context.Context, id string) (*Evaluation, error)
	// JobEvaluations lists a job's evaluations, oldest first.
	JobEvaluations(ctx context.Context, jobID string) ([]*Evaluation, error)
}

func (s *Server) evalRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/evaluations", s.read(s.listEvaluations))
	mux.HandleFunc("GET /v1/evaluation/{id}", s.read(s.getEvaluation))
	mux.HandleFunc("GET /v1/evaluation/{id}/allocations", s.read(s.evalAllocations))
}

func (s *Server) lookupEvaluation(ctx context.Context, id string) (*Evaluation, error) {
	if eb, ok := s.b.(EvaluationBackend); ok {
		ev, err := eb.GetEvaluation(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("failed to get evaluation: %w", err)
		}
		return ev, nil
	}
	if ev := s.evals.get(id); ev != nil {
		return ev, nil
	}
	return nil, fmt.Errorf("evaluation %q: %w", id, ErrNotFound)
}

func (s *Server) getEvaluation(r *http.Request) (any, error) {
	return s.lookupEvaluation(r.Context(), r.PathValue("id"))
}

func (s *Server) evalAllocations(r *http.Request) (any, error) {
	ev, err := s.lookupEvaluation(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	allocs, err := s.b.JobAllocations(r.Context(), ev.JobID)
	if err != nil {
		return nil, fmt.Errorf("failed to list job allocations: %w", err)
	}
	out := make([]*AllocListStub, 0, len(allocs))
	for _, a := range allocs {
		if a.EvalID == ev.ID {
			out = append(out, NewAllocListStub(a))
		}
	}
	return out, nil
}

// listEvaluations serves GET /v1/evaluations: the evaluations of every
// job (those of purged jobs are gone with them), sorted by ID, narrowed by
// ?prefix=, ?filter_job_id= and ?filter_eval_status= as in Nomad.
func (s *Server) listEvaluations(r *http.Request) (any, error) {
	q := r.URL.Query()
	prefix, status := q.Get("prefix"), q.Get("filter_eval_status")
	jobIDs := []string{q.Get("filter_job_id")}
	if jobIDs[0] == "" {
		jobs, err := s.b.ListJobs(r.Context())
		if err != nil {
			return nil, fmt.Errorf("failed to list jobs: %w", err)
		}
		jobIDs = jobIDs[:0]
		for _, j := range jobs {
			jobIDs = append(jobIDs, j.ID)
		}
	}
	out := []*Evaluation{}
	for _, id := range jobIDs {
		evs, err := s.evaluationsOf(r.Context(), id)
		if errors.Is(err, ErrNotFound) {
			continue // gone since listed, or no such job
		}
		if err != nil {
			return nil, fmt.Errorf("failed to list job evaluations: %w", err)
		}
		for _, ev := range evs {
			if strings.HasPrefix(ev.ID, prefix) && (status == "" || ev.Status == status) {
				out = append(out, ev)
			}
		}
	}
	slices.SortFunc(out, func(a, b *Evaluation) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// evaluationsOf lists a job's evaluations, oldest first: the backend's
// when it records them, else the memo's.
func (s *Server) evaluationsOf(ctx context.Context, jobID string) ([]*Evaluation, error) {
	if eb, ok := s.b.(EvaluationBackend); ok {
		return eb.JobEvaluations(ctx, jobID)
	}
	return s.evals.forJob(jobID), nil
}

func (s *Server) jobEvaluations(r *http.Request) (any, error) {
	id := r.PathValue("id")
	if eb, ok := s.b.(EvaluationBackend); ok {
		evs, err := eb.JobEvaluations(r.Context(), id)
		if err != nil {
			return nil, fmt.Errorf("failed to list job evaluations: %w", err)
		}
		return evs, nil
	}
	if _, err := s.b.GetJob(r.Context(), id); err != nil {
		return nil, fmt.Errorf("failed to get job: %w", err)
	}
	return s.evals.forJob(id), nil
}

// evalMemoSize bounds the fallback evaluation memo.
const evalMemoSize = 1024

// evalMemo remembers the evaluations this server reported, oldest evicted
// first, for backends without EvaluationBackend.
type evalMemo struct {
	mu    sync.Mutex
	max   int
	order []string
	byID  map[string]*Evaluation
}

func newEvalMemo(n int) *evalMemo {
	return &evalMemo{max: n, byID: make(map[string]*Evaluation)}
}

func (m *evalMemo) remember(ev *Evaluation) {
	if ev.ID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[ev.ID]; !ok {
		m.order = append(m.order, ev.ID)
	}
	m.byID[ev.ID] = ev
	for len(m.order) > m.max {
		delete(m.byID, m.order[0])
		m.order = m.order[1:]
	}
}

func (m *evalMemo) get(id string) *Evaluation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev, ok := m.byID[id]; ok {
		cp := *ev
		return &cp
	}
	return nil
}

func (m *evalMemo) forJob(jobID string) []*Evaluation {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*Evaluation{}
	for _, id := range m.order {
		if ev := m.byID[id]; ev.JobID == jobID {
			cp := *ev
			out = append(out, &cp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreateIndex < out[j].CreateIndex })
	return out
}
