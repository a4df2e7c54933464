// Package server is meshlet's server role: it admits jobs (canonicalize,
// validate, mutate), keeps their versions, runs the scheduler on every job
// change and persists the resulting plans, and serves clients their
// allocations through a narrow RPC-shaped surface (RegisterNode,
// NodeAllocs, UpdateAllocs) so that a network can later sit between the two
// roles. Failed allocations are replaced after their group's reschedule
// delay (reschedule.go); old evaluations and replaced allocations are
// collected (gc.go).
//
// Concurrency: the scheduler computes a plan without locks from a snapshot
// of the state; the plan is committed in ONE state transaction (job
// version, allocations, evaluations) under one mutex, and only if no other
// commit happened meanwhile (see plan.go), so plans never hand out the same
// port twice and a crash never leaves half a plan. Garbage collection reads
// without it and commits under it. Reads go straight to the state store and run
// concurrently. Follow-up timers (delayed reschedules) run plans like any
// other caller.
package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/jobspecs"
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

// Defaults of the Config bounds and collection thresholds.
const (
	// DefaultMaxJobCount bounds the allocations one job may ask for (the
	// sum of its groups' counts): the jobspec's limit, kept in one place.
	DefaultMaxJobCount = jobspecs.DefaultMaxCount
	// DefaultMaxJobSize bounds a job's encoded size (the jobspec's limit).
	DefaultMaxJobSize = jobspecs.DefaultMaxJobBytes
	// DefaultMaxPlanSize bounds a job's size times its count: every
	// allocation stores a copy of its job.
	DefaultMaxPlanSize = 512 << 20
	// DefaultEvalGCThreshold and DefaultAllocGCThreshold are Nomad's
	// eval_gc_threshold; DefaultGCInterval how often collection runs at most.
	DefaultEvalGCThreshold  = time.Hour
	DefaultAllocGCThreshold = time.Hour
	DefaultNodeGCThreshold  = 24 * time.Hour // Nomad's node_gc_threshold
	DefaultGCInterval       = 5 * time.Minute
)

// Config configures a Server.
type Config struct {
	Store     state.Store
	Scheduler scheduler.Scheduler
	Admission Admission
	Mutators  []JobMutator
	Logger    hclog.Logger
	// Now stamps jobs and evaluations; nil = time.Now.
	Now func() time.Time

	// MaxJobCount, MaxJobSize (bytes, JSON-encoded) and MaxPlanSize (job
	// size × count) bound what a registration may ask for; zero = the
	// defaults, negative = no limit.
	MaxJobCount int
	MaxJobSize  int
	MaxPlanSize int
	// EvalGCThreshold is the age after which finished evaluations (except
	// each job's latest) are removed; AllocGCThreshold the age after which
	// terminal allocations that were stopped or replaced are removed;
	// NodeGCThreshold how long a node stays down, with no allocation left
	// to run, before it is removed. GCInterval is the least time between
	// two collections. Zero = the defaults.
	EvalGCThreshold  time.Duration
	AllocGCThreshold time.Duration
	NodeGCThreshold  time.Duration
	GCInterval       time.Duration
	// MinHeartbeatTTL, HeartbeatGrace and MaxHeartbeatsPerSecond set the
	// clients' heartbeat interval and how long the server waits past it
	// before a node is down; FailoverHeartbeatTTL is every node's first
	// deadline under a new leader. Zero = the defaults.
	MinHeartbeatTTL        time.Duration
	HeartbeatGrace         time.Duration
	MaxHeartbeatsPerSecond float64
	FailoverHeartbeatTTL   time.Duration
	// Leadership, when set, elects the one server that schedules (see
	// leader.go); nil = this server always leads (one process, one store).
	Leadership Leadership
	// NodeDown, when set, is called on the leader once a node's down status
	// is stored, before its jobs are evaluated: the mesh removes its
	// service registrations. It must not block for long.
	NodeDown func(nodeID string)
}

// Server is the server role.
type Server struct {
	store     state.Store
	sched     scheduler.Scheduler
	admission Admission
	mutators  []JobMutator
	logger    hclog.Logger
	now       func() time.Time
	cfg       Config

	// planMu serializes plan commits and collections; planGen counts the
	// commits that may invalidate a plan computed without the lock.
	planMu  sync.Mutex
	planGen atomic.Uint64
	// gcBatch is the first batch size of applyInBatches (defaultGCBatch);
	// atomic so tests can lower it on a running server.
	gcBatch atomic.Int64

	// mu guards the follow-up timers and the last collection time.
	mu     sync.Mutex
	timers map[string]*time.Timer
	// heartbeats are the nodes' heartbeat deadlines (leader only).
	heartbeats map[string]*time.Timer
	// nodeAllocCount is how many allocations each node had when its last
	// NodeAllocs returned (a removal wakes it).
	nodeAllocCount map[string]int
	// blocked are the jobs whose latest plan left placements undone
	// (leader only; see blocked.go).
	blocked  map[string]bool
	lastGC   time.Time
	shutdown bool

	// leader is set while this server schedules; stopElection and
	// electionDone stop and await the election (nil without Leadership).
	leader       atomic.Bool
	stopElection context.CancelFunc
	electionDone chan struct{}
}

// New returns a Server over cfg.Store. It first evaluates what a crash may
// have left unplanned (see recoverState) and re-arms pending reschedules.
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
	defaults := []struct {
		v *int
		d int
	}{{&cfg.MaxJobCount, DefaultMaxJobCount}, {&cfg.MaxJobSize, DefaultMaxJobSize}, {&cfg.MaxPlanSize, DefaultMaxPlanSize}}
	for _, x := range defaults {
		if *x.v == 0 {
			*x.v = x.d
		}
	}
	durations := []struct {
		v *time.Duration
		d time.Duration
	}{{&cfg.EvalGCThreshold, DefaultEvalGCThreshold}, {&cfg.AllocGCThreshold, DefaultAllocGCThreshold},
		{&cfg.NodeGCThreshold, DefaultNodeGCThreshold},
		{&cfg.GCInterval, DefaultGCInterval}, {&cfg.MinHeartbeatTTL, DefaultMinHeartbeatTTL},
		{&cfg.HeartbeatGrace, DefaultHeartbeatGrace}, {&cfg.FailoverHeartbeatTTL, DefaultFailoverHeartbeatTTL}}
	for _, x := range durations {
		if *x.v <= 0 {
			*x.v = x.d
		}
	}
	if cfg.MaxHeartbeatsPerSecond <= 0 {
		cfg.MaxHeartbeatsPerSecond = DefaultMaxHeartbeatsPerSecond
	}
	s := &Server{store: cfg.Store, heartbeats: map[string]*time.Timer{}, nodeAllocCount: map[string]int{}, blocked: map[string]bool{}, sched: cfg.Scheduler, admission: cfg.Admission, mutators: cfg.Mutators,
		logger: cfg.Logger, now: cfg.Now, cfg: cfg, timers: map[string]*time.Timer{}, lastGC: cfg.Now()}
	s.gcBatch.Store(defaultGCBatch)
	if cfg.Leadership != nil {
		s.startLeadership(cfg.Leadership)
		return s, nil
	}
	s.leader.Store(true)
	if err := s.leaderDuties(); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// Shutdown leaves the election and stops the follow-up timers; the server
// must not be used after.
func (s *Server) Shutdown() {
	if s.stopElection != nil {
		s.stopElection()
		<-s.electionDone
	}
	s.stopTimers()
}

// ClusterID identifies the cluster (see state.Store); clients may record it
// and refuse a server whose state was lost and started over.
func (s *Server) ClusterID() string { return s.store.ClusterID() }

// Index is the state store's latest index.
func (s *Server) Index() uint64 { return s.store.Index() }

// WaitIndex blocks until the index passes minIndex or ctx ends.
func (s *Server) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	return s.store.WaitIndex(ctx, minIndex)
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
