package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Backend implements api.Backend (and api.EvaluationBackend) over the
// server and client roles, mapping their errors onto the API's sentinels.
type Backend struct {
	server *server.Server
	client *client.Client
	// members answers the cluster calls (nil: a one-server cluster).
	members *memberView
	store   state.Store // the server's state store (nil on a client-only agent)
	// catalog holds this node's registrations with their check results.
	catalog *catalog.Catalog
}

var (
	_ api.Backend           = (*Backend)(nil)
	_ api.EvaluationBackend = (*Backend)(nil)
)

// apiError keeps an error's message and adds an API sentinel to its chain.
type apiError struct {
	err      error
	sentinel error
}

func (e *apiError) Error() string   { return e.err.Error() }
func (e *apiError) Unwrap() []error { return []error{e.err, e.sentinel} }

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, server.ErrInvalid):
		return &apiError{err, api.ErrInvalid}
	case errors.Is(err, server.ErrAmbiguousPrefix):
		return &apiError{err, api.ErrAmbiguousPrefix}
	case errors.Is(err, server.ErrNotFound), errors.Is(err, state.ErrNotFound),
		errors.Is(err, client.ErrAllocNotFound), errors.Is(err, client.ErrTaskNotFound):
		return &apiError{err, api.ErrNotFound}
	case errors.Is(err, client.ErrTaskNotRunning):
		return &apiError{err, api.ErrInvalid}
	}
	return err
}

// Index implements api.Backend (0 on a client-only agent, whose indexed
// reads go to the servers).
func (b *Backend) Index() uint64 {
	if b.server == nil {
		return 0
	}
	return b.server.Index()
}

// WaitIndex implements api.Backend.
func (b *Backend) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	if b.server == nil {
		return 0
	}
	return b.server.WaitIndex(ctx, minIndex)
}

// RegisterJob implements api.Backend.
func (b *Backend) RegisterJob(ctx context.Context, job *structs.Job, opts api.RegisterOptions) (*api.RegisterResult, error) {
	res, err := b.server.RegisterJobWith(ctx, job, server.RegisterOptions{EnforceIndex: opts.EnforceIndex,
		JobModifyIndex: opts.JobModifyIndex, PreserveCounts: opts.PreserveCounts})
	if err != nil {
		return nil, mapErr(err)
	}
	return &api.RegisterResult{EvalID: res.EvalID, EvalCreateIndex: res.EvalCreateIndex,
		JobModifyIndex: res.JobModifyIndex, Warnings: strings.Join(res.Warnings, "\n")}, nil
}

// ListJobs implements api.Backend.
func (b *Backend) ListJobs(ctx context.Context) ([]*structs.Job, error) {
	jobs, err := b.server.Jobs(ctx)
	return jobs, mapErr(err)
}

// GetJob implements api.Backend.
func (b *Backend) GetJob(ctx context.Context, id string) (*structs.Job, error) {
	job, err := b.server.Job(ctx, id)
	return job, mapErr(err)
}

// StopJob implements api.Backend.
func (b *Backend) StopJob(ctx context.Context, id string, purge bool) (string, error) {
	evalID, err := b.server.StopJob(ctx, id, purge)
	return evalID, mapErr(err)
}

// JobAllocations implements api.Backend.
func (b *Backend) JobAllocations(ctx context.Context, jobID string) ([]*structs.Allocation, error) {
	allocs, err := b.server.JobAllocs(ctx, jobID)
	return allocs, mapErr(err)
}

// ListAllocations implements api.Backend.
func (b *Backend) ListAllocations(ctx context.Context) ([]*structs.Allocation, error) {
	allocs, err := b.server.Allocs(ctx)
	return allocs, mapErr(err)
}

// GetAllocation implements api.Backend.
// A client-only agent knows the allocations of its own node (its other
// reads go to the servers, see forwardToServers).
func (b *Backend) GetAllocation(ctx context.Context, id string) (*structs.Allocation, error) {
	if b.server == nil {
		a, err := localAlloc(b.client, id)
		return a, mapErr(err)
	}
	a, err := b.server.Alloc(ctx, id)
	return a, mapErr(err)
}

// JobVersions implements api.JobVersionsBackend.
func (b *Backend) JobVersions(ctx context.Context, id string) ([]*structs.Job, error) {
	if b.server == nil {
		return nil, &apiError{fmt.Errorf("this agent runs no server"), api.ErrNotFound}
	}
	versions, err := b.server.JobVersions(ctx, id)
	return versions, mapErr(err)
}

// ListNodes implements api.Backend.
func (b *Backend) ListNodes(ctx context.Context) ([]*structs.Node, error) {
	nodes, err := b.server.Nodes(ctx)
	return nodes, mapErr(err)
}

// GetNode implements api.Backend.
func (b *Backend) GetNode(ctx context.Context, id string) (*structs.Node, error) {
	n, err := b.server.Node(ctx, id)
	return n, mapErr(err)
}

// UpdateNodeEligibility implements api.Backend.
func (b *Backend) UpdateNodeEligibility(ctx context.Context, id string, eligible bool) (*api.NodeUpdateResult, error) {
	res, err := b.server.UpdateNodeEligibility(ctx, id, eligible)
	if err != nil {
		return nil, mapErr(err)
	}
	return &api.NodeUpdateResult{EvalIDs: res.EvalIDs, NodeModifyIndex: res.NodeModifyIndex}, nil
}

// UpdateNodeDrain implements api.Backend.
func (b *Backend) UpdateNodeDrain(ctx context.Context, id string, spec *structs.DrainSpec, markEligible bool) (*api.NodeUpdateResult, error) {
	res, err := b.server.UpdateNodeDrain(ctx, id, spec, markEligible)
	if err != nil {
		return nil, mapErr(err)
	}
	return &api.NodeUpdateResult{EvalIDs: res.EvalIDs, NodeModifyIndex: res.NodeModifyIndex}, nil
}

// resolveTask finds the allocation (ID or prefix) and defaults the task
// when the group has exactly one.
func (b *Backend) resolveTask(ctx context.Context, allocID, task string) (*structs.Allocation, string, error) {
	a, err := b.GetAllocation(ctx, allocID)
	if err != nil {
		return nil, "", err
	}
	if task != "" {
		return a, task, nil
	}
	var names []string
	if a.Job != nil {
		if tg := a.Job.LookupTaskGroup(a.TaskGroup); tg != nil {
			for _, t := range tg.Tasks {
				names = append(names, t.Name)
			}
		}
	}
	if len(names) != 1 {
		return nil, "", &apiError{fmt.Errorf("allocation %s has tasks %v: name one", a.ID, names), api.ErrInvalid}
	}
	return a, names[0], nil
}

// TaskLogs implements api.Backend.
func (b *Backend) TaskLogs(ctx context.Context, req api.LogRequest) (io.ReadCloser, error) {
	a, task, err := b.resolveTask(ctx, req.AllocID, req.Task)
	if err != nil {
		return nil, err
	}
	stream, origin := req.Type, req.Origin
	if stream == "" {
		stream = "stdout"
	}
	if origin == "" {
		origin = "start"
	}
	rc, err := b.client.TaskLogs(ctx, a.ID, task, stream, origin, req.Offset, req.Follow)
	if err != nil && !errors.Is(err, client.ErrAllocNotFound) && !errors.Is(err, client.ErrTaskNotFound) {
		return nil, &apiError{err, api.ErrInvalid}
	}
	return rc, mapErr(err)
}

// ExecTask implements api.Backend.
func (b *Backend) ExecTask(ctx context.Context, req api.ExecRequest) (int, error) {
	a, task, err := b.resolveTask(ctx, req.AllocID, req.Task)
	if err != nil {
		return 0, err
	}
	opts := &driver.ExecOptions{Command: req.Cmd, Stdin: req.Stdin,
		Stdout: req.Stdout, Stderr: req.Stderr, TTY: req.TTY, Resize: req.Resize}
	code, err := b.client.ExecTask(ctx, a.ID, task, opts)
	return code, mapErr(err)
}

// GetEvaluation implements api.EvaluationBackend.
func (b *Backend) GetEvaluation(ctx context.Context, id string) (*api.Evaluation, error) {
	e, err := b.server.Eval(ctx, id)
	if err != nil {
		return nil, mapErr(err)
	}
	return toAPIEval(e), nil
}

// JobEvaluations implements api.EvaluationBackend (oldest first).
func (b *Backend) JobEvaluations(ctx context.Context, jobID string) ([]*api.Evaluation, error) {
	evals, err := b.server.JobEvals(ctx, jobID)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]*api.Evaluation, 0, len(evals))
	for i := len(evals) - 1; i >= 0; i-- {
		out = append(out, toAPIEval(evals[i]))
	}
	return out, nil
}

func toAPIEval(e *state.Evaluation) *api.Evaluation {
	out := &api.Evaluation{ID: e.ID, Namespace: e.Namespace, Priority: e.Priority, Type: e.Type, TriggeredBy: e.TriggeredBy,
		JobID: e.JobID, JobModifyIndex: e.JobModifyIndex, NodeID: e.NodeID, Status: e.Status,
		StatusDescription: e.StatusDescription, CreateIndex: e.CreateIndex, ModifyIndex: e.ModifyIndex,
		CreateTime: e.CreateTime, ModifyTime: e.ModifyTime, PreviousEval: e.PreviousEval}
	if e.WaitUntil != 0 {
		out.WaitUntil = time.Unix(0, e.WaitUntil).UTC()
	}
	if len(e.FailedTGAllocs) > 0 {
		out.FailedTGAllocs = map[string]*api.AllocationMetric{}
		for g, m := range e.FailedTGAllocs {
			out.FailedTGAllocs[g] = &api.AllocationMetric{NodesEvaluated: m.NodesEvaluated, NodesFiltered: m.NodesFiltered,
				ConstraintFiltered: m.ConstraintFiltered, NodesExhausted: m.NodesExhausted,
				DimensionExhausted: m.DimensionExhausted, CoalescedFailures: m.CoalescedFailures}
		}
	}
	return out
}
