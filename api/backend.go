// Package api serves meshlet's HTTP API in Nomad's /v1 shapes (the
// implemented subset), so that the official github.com/hashicorp/nomad/api
// client and meshlet's own CLI work against it. It owns HTTP concerns only
// (routing, encoding, status codes, blocking queries); everything else is
// behind Backend, which the agent implements.
//
// Concurrency: a Server is safe for concurrent use; handlers run on
// net/http's goroutines and share only the Backend and a small
// mutex-guarded evaluation memo. Long-lived requests (blocking queries, log
// follows, exec sessions) end when the client leaves or Server.Close is
// called. Package apitest holds an in-memory Backend for tests.
package api

import (
	"context"
	"errors"
	"io"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// Sentinel errors a Backend returns (wrapped with %w); the server maps them
// to HTTP status codes.
var (
	// ErrNotFound maps to 404.
	ErrNotFound = errors.New("not found")
	// ErrInvalid maps to 400: the request was understood but rejected, and
	// nothing was changed.
	ErrInvalid = errors.New("invalid request")
	// ErrAmbiguousPrefix maps to 400: an ID prefix matched several objects.
	ErrAmbiguousPrefix = errors.New("ambiguous ID prefix")
)

// RegisterResult is the outcome of a job registration.
type RegisterResult struct {
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Warnings        string
}

// NodeUpdateResult is the outcome of a node drain or eligibility change.
type NodeUpdateResult struct {
	// EvalIDs are the evaluations the change created (empty, never nil).
	EvalIDs         []string
	NodeModifyIndex uint64
}

// LogRequest selects a task's log stream.
type LogRequest struct {
	AllocID string
	Task    string
	Type    string // "stdout" or "stderr"
	Origin  string // "start" or "end"
	Offset  int64
	Follow  bool
}

// ExecRequest runs a command inside an allocation's task context
// (namespace, environment, working directory).
type ExecRequest struct {
	AllocID string
	Task    string
	Cmd     []string
	TTY     bool
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Resize delivers the client's terminal sizes (tty_size frames), the
	// latest first when the backend falls behind; it is closed when the
	// client's input ends.
	Resize <-chan TerminalSize
}

// TerminalSize is an exec client's terminal size in characters: the
// drivers' own type, handed to them as it comes.
type TerminalSize = driver.TerminalSize

// Backend is what the HTTP API needs from the agent. Methods return copies
// the caller may keep. Lists are sorted by ID (allocations: by job, group,
// index).
type Backend interface {
	// Index is the state store's latest modify index (X-Nomad-Index), and
	// WaitIndex blocks until it passes minIndex or ctx ends (blocking queries).
	Index() uint64
	WaitIndex(ctx context.Context, minIndex uint64) uint64

	// RegisterJob registers job if opts' conditions hold (ErrInvalid,
	// nothing stored, otherwise).
	RegisterJob(ctx context.Context, job *structs.Job, opts RegisterOptions) (*RegisterResult, error)
	ListJobs(ctx context.Context) ([]*structs.Job, error)
	GetJob(ctx context.Context, id string) (*structs.Job, error)
	// StopJob marks the job stopped (purge: also removes it once its
	// allocations are stopped) and returns the evaluation ID.
	StopJob(ctx context.Context, id string, purge bool) (string, error)
	JobAllocations(ctx context.Context, jobID string) ([]*structs.Allocation, error)

	ListAllocations(ctx context.Context) ([]*structs.Allocation, error)
	// GetAllocation accepts a full ID or a unique prefix.
	GetAllocation(ctx context.Context, id string) (*structs.Allocation, error)

	ListNodes(ctx context.Context) ([]*structs.Node, error)
	// GetNode accepts a full ID or a unique prefix.
	GetNode(ctx context.Context, id string) (*structs.Node, error)
	// UpdateNodeEligibility marks the node (ID or unique prefix) eligible
	// or not for new allocations; a draining node cannot be made eligible
	// (ErrInvalid).
	UpdateNodeEligibility(ctx context.Context, id string, eligible bool) (*NodeUpdateResult, error)
	// UpdateNodeDrain starts or changes the node's drain, or cancels it
	// when spec is nil (markEligible: the node is eligible again).
	UpdateNodeDrain(ctx context.Context, id string, spec *structs.DrainSpec, markEligible bool) (*NodeUpdateResult, error)

	// TaskLogs streams a task's log across rotated files.
	TaskLogs(ctx context.Context, req LogRequest) (io.ReadCloser, error)
	// ExecTask runs req.Cmd and returns its exit code.
	ExecTask(ctx context.Context, req ExecRequest) (int, error)
}
