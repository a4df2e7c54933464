// Package state owns the server role's persistent state: jobs (with their
// versions), allocations, nodes and evaluations, behind the small Store
// interface, plus a bbolt implementation (BoltStore) kept in
// <data_dir>/server/state.db and an etcd implementation (EtcdStore, see
// etcd.go) that keeps the state of a cluster of servers under one key
// prefix, with optimistic concurrency between servers and an optional
// leader guard on every write.
//
// Every write commits in one transaction and advances a single, monotonically
// increasing modify index; readers may block until the index passes a value
// (WaitIndex) to implement blocking queries. Everything one scheduler run
// changes (job version, allocations, evaluations) is one ApplyPlan, so a
// crash or a full disk never leaves half a plan. Only the latest
// Options.JobVersions versions of a job are kept; allocations are also
// indexed by node, in the same transactions. OpenBolt refuses a state file
// that was lost, emptied or damaged instead of starting empty (see
// integrity.go). Reads return fresh copies that
// callers may keep and mutate. All methods are safe for concurrent use: writes
// are serialized by the backend, reads run concurrently.
//
// Client-local state (task handles, network status) does not live here; see
// client/state.
package state

import (
	"context"
	"errors"

	"github.com/meshlet/meshlet/structs"
)

// ErrNotFound is returned for an unknown job, allocation, node or evaluation.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by a store used after Close.
var ErrClosed = errors.New("state store closed")

// Store is the server's persistent state. Implementations must keep it free
// of backend types so that another backend (etcd) can sit behind it.
type Store interface {
	// ClusterID identifies the cluster whose state this is, recorded when
	// the store was first created (a store that lost its state gets a new
	// one, so holders of the old ID can tell).
	ClusterID() string
	// Index is the latest modify index.
	Index() uint64
	// WaitIndex blocks until Index() > minIndex or ctx ends, and returns the
	// index at that moment.
	WaitIndex(ctx context.Context, minIndex uint64) uint64

	// UpsertJob stores job as its latest version and records the version in
	// the job's history. It sets CreateIndex (kept from an existing job),
	// ModifyIndex and JobModifyIndex. It returns the write's index.
	UpsertJob(job *structs.Job) (uint64, error)
	// UpdateJobStatus changes only the job's Status and ModifyIndex.
	UpdateJobStatus(id, status string) (uint64, error)
	Job(id string) (*structs.Job, error)
	Jobs() ([]*structs.Job, error)
	// JobVersions returns every stored version, newest first.
	JobVersions(id string) ([]*structs.Job, error)
	// DeleteJob removes the job, its versions and its evaluations.
	DeleteJob(id string) (uint64, error)

	// ApplyPlan commits everything one plan changes (job version,
	// allocations, evaluations, deletions) in one transaction: either all of
	// it is stored or none of it.
	ApplyPlan(p *Plan) (uint64, error)

	// UpsertAllocs writes server-side changes (placement, desired status,
	// in-place job updates): it sets CreateIndex for new allocations,
	// ModifyIndex and AllocModifyIndex.
	UpsertAllocs(allocs []*structs.Allocation) (uint64, error)
	// UpdateAllocsFromClient merges what a client reports (ClientStatus,
	// ClientDescription, TaskStates, NetworkStatus) into stored allocations,
	// leaving AllocModifyIndex alone. Unknown IDs are skipped.
	UpdateAllocsFromClient(updates []*structs.Allocation) (uint64, error)
	Alloc(id string) (*structs.Allocation, error)
	Allocs() ([]*structs.Allocation, error)
	AllocsByJob(jobID string) ([]*structs.Allocation, error)
	AllocsByNode(nodeID string) ([]*structs.Allocation, error)
	DeleteAllocs(ids []string) (uint64, error)

	UpsertNode(node *structs.Node) (uint64, error)
	Node(id string) (*structs.Node, error)
	Nodes() ([]*structs.Node, error)
	// DeleteNode removes a node; an unknown one is ErrNotFound.
	DeleteNode(id string) (uint64, error)

	UpsertEval(eval *Evaluation) (uint64, error)
	Eval(id string) (*Evaluation, error)
	// EvalsByJob returns the job's evaluations, newest first.
	EvalsByJob(jobID string) ([]*Evaluation, error)
	// Evals returns every evaluation, sorted by ID.
	Evals() ([]*Evaluation, error)

	Close() error
}

// NodeAllocsIndexer is what a Store may offer a node's blocking fetch of
// its allocations: whether anything the node acts on changed, without
// decoding the allocations. NodeAllocsIndex returns the highest index at
// which the servers changed one of the node's allocations (placement,
// desired status, job) or one was stored terminal, and how many the node
// has (a removal shows as fewer); ok=false when the store cannot tell.
type NodeAllocsIndexer interface {
	NodeAllocsIndex(nodeID string) (index uint64, count int, ok bool, err error)
}

// Plan is one atomic write of the server: what a scheduler run (or a
// garbage collection) changes. Zero fields change nothing.
type Plan struct {
	// Job, when set, is stored as the job's latest version, as UpsertJob
	// does. Allocations and evaluations of the plan that refer to this job
	// version get the stored job's indexes.
	Job *structs.Job
	// Allocs are server-side allocation writes, as UpsertAllocs does.
	Allocs []*structs.Allocation
	// Evals are stored as UpsertEval does.
	Evals []*Evaluation
	// PurgeJobID, when set, removes that job, its versions and its
	// evaluations other than the plan's own Evals (the purge's evaluation
	// stays readable, as Nomad's, until garbage collection).
	PurgeJobID string
	// DeleteAllocs and DeleteEvals remove allocations and evaluations;
	// unknown IDs are ignored.
	DeleteAllocs []string
	DeleteEvals  []string
}

// ownEvals is the set of the plan's evaluation IDs.
func (p *Plan) ownEvals() map[string]bool {
	out := make(map[string]bool, len(p.Evals))
	for _, e := range p.Evals {
		out[e.ID] = true
	}
	return out
}

// Evaluation statuses.
const (
	EvalStatusPending  = "pending"
	EvalStatusComplete = "complete"
	EvalStatusCanceled = "canceled"
	EvalStatusBlocked  = "blocked"
	EvalStatusFailed   = "failed"
)

// Evaluation records one scheduler run, in the shape of Nomad's
// /v1/evaluation (the subset meshlet fills in).
type Evaluation struct {
	ID                string                  `json:"ID"`
	Namespace         string                  `json:"Namespace"`
	Priority          int                     `json:"Priority"`
	Type              string                  `json:"Type"`
	TriggeredBy       string                  `json:"TriggeredBy"`
	JobID             string                  `json:"JobID"`
	JobModifyIndex    uint64                  `json:"JobModifyIndex"`
	NodeID            string                  `json:"NodeID,omitempty"`
	Status            string                  `json:"Status"`
	StatusDescription string                  `json:"StatusDescription,omitempty"`
	FailedTGAllocs    map[string]*AllocMetric `json:"FailedTGAllocs,omitempty"`
	// WaitUntil (unix nanoseconds) is when a pending follow-up evaluation
	// (a delayed reschedule) runs.
	WaitUntil int64 `json:"WaitUntil,omitempty"`
	// PreviousEval is the evaluation that created this follow-up.
	PreviousEval string `json:"PreviousEval,omitempty"`
	CreateIndex  uint64 `json:"CreateIndex"`
	ModifyIndex  uint64 `json:"ModifyIndex"`
	CreateTime   int64  `json:"CreateTime"`
	ModifyTime   int64  `json:"ModifyTime"`
}

// AllocMetric explains a failed placement, as Nomad's AllocMetric does:
// ConstraintFiltered maps a human-readable reason ("driver docker not
// available on node n1") to the number of nodes it excluded.
type AllocMetric struct {
	NodesEvaluated     int            `json:"NodesEvaluated"`
	NodesFiltered      int            `json:"NodesFiltered"`
	NodesExhausted     int            `json:"NodesExhausted"`
	ConstraintFiltered map[string]int `json:"ConstraintFiltered,omitempty"`
	DimensionExhausted map[string]int `json:"DimensionExhausted,omitempty"`
	CoalescedFailures  int            `json:"CoalescedFailures"`
}
