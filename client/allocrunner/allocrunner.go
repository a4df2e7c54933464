// Package allocrunner runs one allocation on the client: it builds the alloc
// dir, runs the allocation hooks (network → sidecar → services) before any
// task, runs the tasks in lifecycle order (prestart, main, poststart,
// poststop), stops them in reverse (main tasks first, then sidecars), tears
// the hooks down in reverse and reports the allocation's client status.
//
// Concurrency: Run executes in its own goroutine and owns the lifecycle;
// Update, Kill, Shutdown and Destroy only signal it through channels and
// wait. The mutex guards the allocation and the status fields; it is never
// held while calling hooks, task runners' blocking methods or OnUpdate.
package allocrunner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/artifact"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/client/template"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// Config configures an AllocRunner.
type Config struct {
	Alloc    *structs.Allocation
	Node     *structs.Node
	AllocDir *allocdir.AllocDir
	// Driver returns the driver for a task's driver name.
	Driver func(name string) (driver.Driver, error)
	State  clientstate.Store
	// Hooks run in order before the tasks; the network hook comes first.
	Hooks []AllocHook
	// Restored marks an allocation found in the client state after an
	// agent restart; RestoredTasks is its tasks' persisted state.
	Restored      bool
	RestoredTasks map[string]*clientstate.LocalTaskState
	// OnUpdate receives a copy of the allocation's client view (status,
	// task states, network status) after every change; called without locks.
	OnUpdate func(*structs.Allocation)
	// PrevAlloc blocks until the allocation this one replaces has stopped
	// (or ctx ends); nil means do not wait.
	PrevAlloc func(ctx context.Context, allocID string)
	Logger    hclog.Logger
	// TaskRand is passed to task runners (restart jitter); nil = random.
	TaskRand func(n int64) int64
	// Artifacts bounds artifact downloads; zero fields mean the defaults.
	Artifacts artifact.Config
	// TemplateCatalog is the service data task templates read; nil makes
	// their service functions fail.
	TemplateCatalog template.Catalog
	// MaxKillTimeout caps the tasks' kill_timeout (0: no cap).
	MaxKillTimeout time.Duration
}

// AllocRunner runs one allocation.
type AllocRunner struct {
	cfg    Config
	logger hclog.Logger
	hc     *AllocHookContext

	// publishMu orders publish calls (status.go).
	publishMu sync.Mutex
	// taskHookMu serializes the TaskStateHook calls; taskHooksOn: they
	// have started (status.go).
	taskHookMu  sync.Mutex
	taskHooksOn bool

	mu         sync.Mutex
	alloc      *structs.Allocation
	tasks      map[string]*taskrunner.TaskRunner
	order      []string // task names in jobspec order
	setupErr   string
	netStatus  *structs.AllocNetworkStatus
	lastStatus string

	killOnce     sync.Once
	killCh       chan struct{}
	shutdownOnce sync.Once
	shutdownCh   chan struct{}
	waitCh       chan struct{}
	updateCh     chan struct{}
	ctx          context.Context
	cancel       context.CancelFunc
}

// New returns a runner for cfg.Alloc and creates its task runners, so that
// every task shows up (pending, "Received") at once.
func New(cfg Config) (*AllocRunner, error) {
	if cfg.Alloc == nil || cfg.Alloc.Job == nil {
		return nil, fmt.Errorf("failed to create alloc runner: allocation without job")
	}
	tg := cfg.Alloc.Job.LookupTaskGroup(cfg.Alloc.TaskGroup)
	if tg == nil {
		return nil, fmt.Errorf("failed to create alloc runner: group %q not in job %s", cfg.Alloc.TaskGroup, cfg.Alloc.JobID)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	logger := cfg.Logger.With("alloc_id", cfg.Alloc.ID)
	ctx, cancel := context.WithCancel(context.Background())
	ar := &AllocRunner{cfg: cfg, logger: logger, alloc: cfg.Alloc, tasks: map[string]*taskrunner.TaskRunner{},
		killCh: make(chan struct{}), shutdownCh: make(chan struct{}), waitCh: make(chan struct{}),
		updateCh: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	ar.hc = &AllocHookContext{Alloc: cfg.Alloc, Node: cfg.Node, AllocDir: cfg.AllocDir, Restored: cfg.Restored,
		Env: map[string]string{}, Logger: logger}
	if cfg.Restored && cfg.State != nil {
		// The view published before the network hook re-attaches keeps the
		// address the allocation had: its tasks still use it.
		if st, err := cfg.State.NetworkStatus(cfg.Alloc.ID); err == nil {
			ar.netStatus = st
		}
	}
	fetcher := artifact.New(cfg.Artifacts)
	for _, t := range tg.Tasks {
		drv, err := cfg.Driver(t.Driver)
		if err != nil {
			drv = missingDriver{name: t.Driver, err: err}
		}
		tr := taskrunner.New(taskrunner.Config{Alloc: cfg.Alloc, Task: t, Driver: drv, TaskDir: cfg.AllocDir.TaskDir(t.Name),
			AllocDir: cfg.AllocDir.SharedDir, State: cfg.State, Restored: cfg.RestoredTasks[t.Name],
			Prestart: prestartHooks(t, fetcher, cfg), TaskHook: templateHook(cfg, t),
			OnStateChange: ar.taskStateChanged, Logger: cfg.Logger.Named("task_runner"), Rand: cfg.TaskRand,
			MaxKillTimeout: cfg.MaxKillTimeout})
		ar.tasks[t.Name] = tr
		ar.order = append(ar.order, t.Name)
	}
	return ar, nil
}

// prestartHooks are the task runner's hooks for t: the artifact hook when
// it has artifacts.
func prestartHooks(t *structs.Task, fetcher *artifact.Fetcher, cfg Config) []taskrunner.PrestartHook {
	if len(t.Artifacts) == 0 {
		return nil
	}
	return []taskrunner.PrestartHook{artifact.NewHook(fetcher, cfg.AllocDir.SharedDir, cfg.Logger.Named("artifact"))}
}

// ID is the allocation's ID.
func (ar *AllocRunner) ID() string { return ar.cfg.Alloc.ID }

// Alloc returns the allocation as last received from the server.
func (ar *AllocRunner) Alloc() *structs.Allocation {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.alloc
}

// TaskRunner returns the runner of a task, or nil.
func (ar *AllocRunner) TaskRunner(task string) *taskrunner.TaskRunner {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.tasks[task]
}

// TaskNames returns the allocation's task names in jobspec order.
func (ar *AllocRunner) TaskNames() []string {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return append([]string(nil), ar.order...)
}

// WaitCh is closed when Run returned.
func (ar *AllocRunner) WaitCh() <-chan struct{} { return ar.waitCh }

// Update applies a new version of the allocation from the server: a
// desired status of stop kills it; other changes (an in-place job update)
// are recorded.
func (ar *AllocRunner) Update(alloc *structs.Allocation) {
	ar.mu.Lock()
	ar.alloc = alloc
	ar.mu.Unlock()
	if ar.cfg.State != nil {
		if err := ar.cfg.State.PutAlloc(alloc); err != nil {
			ar.logger.Error("failed to persist allocation", "error", err)
		}
	}
	if alloc.DesiredStatus == structs.AllocDesiredStatusStop {
		ar.Kill()
	}
}

// Kill asks Run to stop every task (and then tear the hooks down); it does
// not wait (see WaitCh).
func (ar *AllocRunner) Kill() {
	ar.killOnce.Do(func() { close(ar.killCh) })
}

// Shutdown detaches from the allocation for an agent shutdown: tasks keep
// running and nothing is torn down. It returns once Run returned.
func (ar *AllocRunner) Shutdown() {
	ar.shutdownOnce.Do(func() { close(ar.shutdownCh) })
	ar.cancel()
	for _, name := range ar.TaskNames() {
		ar.TaskRunner(name).Shutdown()
	}
	<-ar.waitCh
}

// Destroy kills the allocation if needed, waits for Run, then runs the
// hooks' Destroy, removes the alloc dir and forgets the client state.
func (ar *AllocRunner) Destroy(ctx context.Context) error {
	ar.Kill()
	select {
	case <-ar.waitCh:
	case <-ctx.Done():
		return fmt.Errorf("failed to destroy allocation %s: %w", ar.ID(), ctx.Err())
	}
	var firstErr error
	for i := len(ar.cfg.Hooks) - 1; i >= 0; i-- {
		if err := ar.destroyHook(ctx, ar.cfg.Hooks[i]); err != nil {
			ar.logger.Warn("hook destroy failed", "hook", ar.cfg.Hooks[i].Name(), "error", err)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if err := ar.cfg.AllocDir.Destroy(); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// HookDestroyTimeout bounds each hook's Destroy, so that one stuck
// teardown neither holds the caller nor leaves the hooks after it no time.
var HookDestroyTimeout = 2 * time.Minute

func (ar *AllocRunner) destroyHook(ctx context.Context, h AllocHook) error {
	ctx, cancel := context.WithTimeout(ctx, HookDestroyTimeout)
	defer cancel()
	return h.Destroy(ctx, ar.hc)
}

// templateHook returns the template hook of a task with templates, nil
// (a nil interface) otherwise.
func templateHook(cfg Config, t *structs.Task) taskrunner.TaskHook {
	if len(t.Templates) == 0 {
		return nil
	}
	nodeName := ""
	if cfg.Node != nil {
		nodeName = cfg.Node.Name
	}
	return template.New(template.Config{AllocID: cfg.Alloc.ID, Task: t, Catalog: cfg.TemplateCatalog, NodeName: nodeName,
		Dirs:   template.Dirs{TaskDir: cfg.AllocDir.TaskDir(t.Name).Dir, SharedDir: cfg.AllocDir.SharedDir},
		Logger: cfg.Logger})
}

// missingDriver stands in for a driver the node does not have, so the task
// fails at once (no restarts) with a driver failure that names it.
type missingDriver struct {
	driver.Driver
	name string
	err  error
}

func (m missingDriver) StartTask(*driver.TaskConfig) (*driver.TaskHandle, error) {
	return nil, driver.Unrecoverable(m.err) // the node's drivers are fixed while the agent runs
}
func (m missingDriver) RecoverTask(*driver.TaskHandle) error { return m.err }
func (m missingDriver) Name() string                         { return m.name }
func (m missingDriver) DestroyTask(string, bool) error       { return nil }
