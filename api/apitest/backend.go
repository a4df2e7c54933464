// Package apitest provides an in-memory api.Backend for tests of the HTTP
// API and the CLI, and ExerciseOfficialClient, a conformance check that
// drives any meshlet agent address with the official Nomad API client.
//
// Backend is a fake of a narrow interface: it places allocations instantly
// on one node and never runs tasks, except ExecTask, which runs the command
// as a real local process. All methods are safe for concurrent use; one
// mutex guards the state and every change bumps the index and wakes
// blocking queries.
package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/structs"
)

// NodeID is the ID of the node a new Backend starts with.
const NodeID = "f3a1c2d4-0000-4000-8000-000000000001"

// NodeName is that node's name.
const NodeName = "dev-1"

// Backend is an in-memory api.Backend (and api.EvaluationBackend).
type Backend struct {
	mu      sync.Mutex
	index   uint64
	changed chan struct{}
	jobs    map[string]*structs.Job
	allocs  map[string]*structs.Allocation
	nodes   map[string]*structs.Node
	evals   map[string]*api.Evaluation
	logs    map[string][]byte // "<task>/<stream>"
	// checks are the service check results by allocation ID (checks.go).
	checks      map[string]nomadapi.AllocCheckStatuses
	checksCalls int
	checksHook  func(ctx context.Context)

	// NewAllocStatus is the client status of newly placed allocations
	// (default "running"; "pending" lets a test script the transitions).
	NewAllocStatus string
}

var _ api.Backend = (*Backend)(nil)
var _ api.EvaluationBackend = (*Backend)(nil)
var _ api.CheckBackend = (*Backend)(nil)

// NewBackend returns a Backend with one ready node that has the raw_exec
// driver.
func NewBackend() *Backend {
	b := &Backend{
		index:   1,
		changed: make(chan struct{}),
		jobs:    make(map[string]*structs.Job),
		allocs:  make(map[string]*structs.Allocation),
		nodes:   make(map[string]*structs.Node),
		evals:   make(map[string]*api.Evaluation),
		logs:    make(map[string][]byte),
		checks:  make(map[string]nomadapi.AllocCheckStatuses),
	}
	b.nodes[NodeID] = &structs.Node{
		ID: NodeID, Name: NodeName, Datacenter: "dc1", Status: structs.NodeStatusReady,
		Attributes: map[string]string{"kernel.name": "linux"},
		Drivers: map[string]*structs.DriverInfo{
			"raw_exec": {Detected: true, Healthy: true, HealthDescription: "Healthy"},
		},
		CreateIndex: 1, ModifyIndex: 1,
	}
	return b
}

// bump advances the index and wakes waiters; callers hold mu.
func (b *Backend) bump() uint64 {
	b.index++
	close(b.changed)
	b.changed = make(chan struct{})
	return b.index
}

// Index implements api.Backend.
func (b *Backend) Index() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.index
}

// WaitIndex implements api.Backend.
func (b *Backend) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	for {
		b.mu.Lock()
		idx, ch := b.index, b.changed
		b.mu.Unlock()
		if idx > minIndex {
			return idx
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return idx
		}
	}
}

// clone deep-copies v through JSON (good enough for a fake).
func clone[T any](v *T) *T {
	if v == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("apitest: failed to copy %T: %v", v, err))
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		panic(fmt.Sprintf("apitest: failed to copy %T: %v", v, err))
	}
	return out
}

// enforce applies a registration's conditions as the server does.
func enforce(opts api.RegisterOptions, old, job *structs.Job) error {
	switch {
	case opts.EnforceIndex && opts.JobModifyIndex == 0 && old != nil:
		return fmt.Errorf("%w: Enforcing job modify index 0: job already exists", api.ErrInvalid)
	case opts.EnforceIndex && opts.JobModifyIndex != 0 && (old == nil || old.JobModifyIndex != opts.JobModifyIndex):
		return fmt.Errorf("%w: Enforcing job modify index %d: job exists with conflicting job modify index", api.ErrInvalid, opts.JobModifyIndex)
	}
	if opts.PreserveCounts && old != nil {
		for _, tg := range job.TaskGroups {
			if was := old.LookupTaskGroup(tg.Name); was != nil {
				tg.Count = was.Count
			}
		}
	}
	return nil
}

// RegisterJob implements api.Backend: it validates minimally, then places
// count allocations per group on the node, or records a placement failure
// when a task's driver is missing there.
func (b *Backend) RegisterJob(_ context.Context, in *structs.Job, opts api.RegisterOptions) (*api.RegisterResult, error) {
	job := clone(in)
	if job.ID == "" {
		job.ID = job.Name
	}
	if job.ID == "" {
		return nil, fmt.Errorf("%w: job ID is required", api.ErrInvalid)
	}
	if len(job.TaskGroups) == 0 {
		return nil, fmt.Errorf("%w: job %q has no task groups", api.ErrInvalid, job.ID)
	}
	if job.Type == "" {
		job.Type = structs.JobTypeService
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := enforce(opts, b.jobs[job.ID], job); err != nil {
		return nil, err
	}
	idx := b.bump()
	if old, ok := b.jobs[job.ID]; ok {
		job.Version = old.Version + 1
		job.CreateIndex = old.CreateIndex
		b.stopAllocsLocked(job.ID, idx, "alloc is being updated due to job update")
	} else {
		job.CreateIndex = idx
	}
	job.ModifyIndex, job.JobModifyIndex = idx, idx
	job.SubmitTime = time.Now().UnixNano()
	job.Status = structs.JobStatusRunning
	ev := &api.Evaluation{
		ID: uuid.NewString(), Namespace: job.Namespace, Priority: job.Priority, Type: job.Type,
		TriggeredBy: "job-register", JobID: job.ID, JobModifyIndex: idx,
		Status: api.EvalStatusComplete, CreateIndex: idx, ModifyIndex: idx,
		CreateTime: time.Now().UnixNano(), ModifyTime: time.Now().UnixNano(),
	}
	b.jobs[job.ID] = job
	b.evals[ev.ID] = ev
	for _, tg := range job.TaskGroups {
		if reason := b.infeasibleLocked(tg); reason != "" {
			if ev.FailedTGAllocs == nil {
				ev.FailedTGAllocs = make(map[string]*api.AllocationMetric)
			}
			ev.FailedTGAllocs[tg.Name] = &api.AllocationMetric{
				NodesEvaluated: 1, NodesFiltered: 1,
				ConstraintFiltered: map[string]int{reason: 1},
			}
			job.Status = structs.JobStatusPending
			continue
		}
		for i := 0; i < tg.Count; i++ {
			b.placeLocked(job, tg, i, ev.ID, idx)
		}
	}
	return &api.RegisterResult{EvalID: ev.ID, EvalCreateIndex: idx, JobModifyIndex: idx}, nil
}

// infeasibleLocked names why tg cannot run on the node, or "".
func (b *Backend) infeasibleLocked(tg *structs.TaskGroup) string {
	node := b.nodes[NodeID]
	for _, t := range tg.Tasks {
		if d, ok := node.Drivers[t.Driver]; !ok || !d.Detected || !d.Healthy {
			return fmt.Sprintf("driver %s not available on node %s", t.Driver, node.Name)
		}
	}
	return ""
}

func (b *Backend) placeLocked(job *structs.Job, tg *structs.TaskGroup, i int, evalID string, idx uint64) {
	status := b.NewAllocStatus
	if status == "" {
		status = structs.AllocClientStatusRunning
	}
	now := time.Now()
	a := &structs.Allocation{
		ID: uuid.NewString(), Namespace: job.Namespace, EvalID: evalID,
		Name:   fmt.Sprintf("%s.%s[%d]", job.ID, tg.Name, i),
		NodeID: NodeID, NodeName: NodeName, JobID: job.ID, Job: clone(job), TaskGroup: tg.Name,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: status,
		TaskStates:  make(map[string]*structs.TaskState),
		CreateIndex: idx, ModifyIndex: idx, AllocModifyIndex: idx,
		CreateTime: now.UnixNano(), ModifyTime: now.UnixNano(),
	}
	for _, t := range tg.Tasks {
		ts := &structs.TaskState{State: structs.TaskStatePending, Events: []*structs.TaskEvent{
			{Type: structs.TaskReceived, Time: now.UnixNano(), DisplayMessage: "Task received by client"},
		}}
		if status == structs.AllocClientStatusRunning {
			ts.State, ts.StartedAt = structs.TaskStateRunning, now
			ts.Events = append(ts.Events, &structs.TaskEvent{
				Type: structs.TaskStarted, Time: now.UnixNano(), DisplayMessage: "Task started by client"})
		}
		a.TaskStates[t.Name] = ts
	}
	b.allocs[a.ID] = a
}

// stopAllocsLocked marks the job's live allocations stopped and complete.
func (b *Backend) stopAllocsLocked(jobID string, idx uint64, why string) {
	now := time.Now()
	for _, a := range b.allocs {
		if a.JobID != jobID || a.DesiredStatus == structs.AllocDesiredStatusStop {
			continue
		}
		a.DesiredStatus, a.DesiredDescription = structs.AllocDesiredStatusStop, why
		if !a.TerminalStatus() {
			a.ClientStatus = structs.AllocClientStatusComplete
		}
		for _, ts := range a.TaskStates {
			ts.State, ts.FinishedAt = structs.TaskStateDead, now
			ts.Events = append(ts.Events, &structs.TaskEvent{
				Type: structs.TaskKilled, Time: now.UnixNano(), DisplayMessage: "Task successfully killed"})
		}
		a.ModifyIndex, a.ModifyTime = idx, now.UnixNano()
	}
}

// ListJobs implements api.Backend.
func (b *Backend) ListJobs(context.Context) ([]*structs.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*structs.Job, 0, len(b.jobs))
	for _, j := range b.jobs {
		out = append(out, clone(j))
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

// GetJob implements api.Backend.
func (b *Backend) GetJob(_ context.Context, id string) (*structs.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %q: %w", id, api.ErrNotFound)
	}
	return clone(j), nil
}

// StopJob implements api.Backend; purge removes the job at once.
func (b *Backend) StopJob(_ context.Context, id string, purge bool) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return "", fmt.Errorf("job %q: %w", id, api.ErrNotFound)
	}
	idx := b.bump()
	j.Stop, j.Status, j.ModifyIndex = true, structs.JobStatusDead, idx
	b.stopAllocsLocked(id, idx, "alloc not needed due to job update")
	if purge {
		delete(b.jobs, id)
	}
	ev := &api.Evaluation{ID: uuid.NewString(), Type: j.Type, TriggeredBy: "job-deregister", JobID: id,
		Status: api.EvalStatusComplete, CreateIndex: idx, ModifyIndex: idx}
	b.evals[ev.ID] = ev
	return ev.ID, nil
}

// JobAllocations implements api.Backend (an unknown job has none).
func (b *Backend) JobAllocations(_ context.Context, jobID string) ([]*structs.Allocation, error) {
	return b.filterAllocs(func(a *structs.Allocation) bool { return a.JobID == jobID }), nil
}

// ListAllocations implements api.Backend.
func (b *Backend) ListAllocations(context.Context) ([]*structs.Allocation, error) {
	return b.filterAllocs(func(*structs.Allocation) bool { return true }), nil
}

func (b *Backend) filterAllocs(keep func(*structs.Allocation) bool) []*structs.Allocation {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []*structs.Allocation{}
	for _, a := range b.allocs {
		if keep(a) {
			out = append(out, clone(a))
		}
	}
	sort.Slice(out, func(i, k int) bool {
		x, y := out[i], out[k]
		if x.JobID != y.JobID {
			return x.JobID < y.JobID
		}
		if x.TaskGroup != y.TaskGroup {
			return x.TaskGroup < y.TaskGroup
		}
		if x.Index() != y.Index() {
			return x.Index() < y.Index()
		}
		return x.CreateIndex < y.CreateIndex
	})
	return out
}

// GetAllocation implements api.Backend (full ID or unique prefix).
func (b *Backend) GetAllocation(_ context.Context, id string) (*structs.Allocation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return byPrefix(b.allocs, id, "allocation")
}

// byPrefix returns a copy of m's value under id, or under the one key id
// is a prefix of; kind names the value in errors.
func byPrefix[T any](m map[string]*T, id, kind string) (*T, error) {
	if v, ok := m[id]; ok {
		return clone(v), nil
	}
	var match []*T
	for k, v := range m {
		if id != "" && strings.HasPrefix(k, id) {
			match = append(match, v)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("%s %q: %w", kind, id, api.ErrNotFound)
	case 1:
		return clone(match[0]), nil
	}
	return nil, fmt.Errorf("%s prefix %q matches %d %ss: %w", kind, id, len(match), kind, api.ErrAmbiguousPrefix)
}

// ListNodes implements api.Backend.
func (b *Backend) ListNodes(context.Context) ([]*structs.Node, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*structs.Node, 0, len(b.nodes))
	for _, n := range b.nodes {
		out = append(out, clone(n))
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

// GetNode implements api.Backend (full ID or unique prefix).
func (b *Backend) GetNode(_ context.Context, id string) (*structs.Node, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return byPrefix(b.nodes, id, "node")
}

// GetEvaluation implements api.EvaluationBackend.
func (b *Backend) GetEvaluation(_ context.Context, id string) (*api.Evaluation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ev, ok := b.evals[id]
	if !ok {
		return nil, fmt.Errorf("evaluation %q: %w", id, api.ErrNotFound)
	}
	return clone(ev), nil
}

// JobEvaluations implements api.EvaluationBackend.
func (b *Backend) JobEvaluations(_ context.Context, jobID string) ([]*api.Evaluation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []*api.Evaluation{}
	for _, ev := range b.evals {
		if ev.JobID == jobID {
			out = append(out, clone(ev))
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].CreateIndex < out[k].CreateIndex })
	return out, nil
}

// AddEvaluation stores ev (e.g. a pending follow-up evaluation) as is.
func (b *Backend) AddEvaluation(ev *api.Evaluation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ev = clone(ev)
	ev.CreateIndex = b.bump()
	ev.ModifyIndex = ev.CreateIndex
	b.evals[ev.ID] = ev
}

// UpdateAlloc applies fn to allocation id under the lock and bumps the
// index, waking blocking queries. It reports whether the allocation exists.
func (b *Backend) UpdateAlloc(id string, fn func(a *structs.Allocation)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.allocs[id]
	if !ok {
		return false
	}
	fn(a)
	idx := b.bump()
	a.ModifyIndex, a.ModifyTime = idx, time.Now().UnixNano()
	return true
}

// SetTaskStatus sets an allocation's client status and every task's state,
// appending an event of type evType with message msg to each task.
func (b *Backend) SetTaskStatus(id, clientStatus, taskState, evType, msg string) bool {
	return b.UpdateAlloc(id, func(a *structs.Allocation) {
		a.ClientStatus = clientStatus
		for _, ts := range a.TaskStates {
			ts.State = taskState
			ts.Failed = clientStatus == structs.AllocClientStatusFailed
			ts.Events = append(ts.Events, &structs.TaskEvent{
				Type: evType, Time: time.Now().UnixNano(), DisplayMessage: msg})
		}
	})
}

// AddNode adds or replaces a node.
func (b *Backend) AddNode(n *structs.Node) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = clone(n)
	n.ModifyIndex = b.bump()
	b.nodes[n.ID] = n
}

// Allocations returns copies of every allocation (sorted like the API).
func (b *Backend) Allocations() []*structs.Allocation {
	return b.filterAllocs(func(*structs.Allocation) bool { return true })
}

// JobIDs returns the registered job IDs, sorted.
func (b *Backend) JobIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.jobs))
	for id := range b.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
