// Package taskrunner runs one task of an allocation through its driver:
// start (or recover after an agent restart), wait, apply the restart
// policy, kill, and record Nomad-style task events. The driver handle is
// persisted in the client state right after StartTask returns so a
// restarted agent re-attaches instead of starting a duplicate.
//
// Concurrency: Run executes in its own goroutine and is the only code that
// talks to the driver about the task's lifecycle; Kill, Restart and
// Shutdown only signal it (through channels) and wait. The mutex guards the task state and
// handle; it is never held while calling the driver, the state store or the
// OnStateChange callback.
package taskrunner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// DefaultKillTimeout applies when a task sets none.
const DefaultKillTimeout = 5 * time.Second

// Config configures a TaskRunner.
type Config struct {
	Alloc     *structs.Allocation
	Task      *structs.Task
	Driver    driver.Driver
	TaskDir   allocdir.TaskDir
	AllocDir  string // the shared alloc/ dir
	Env       *taskenv.Env
	NetNSPath string
	State     clientstate.Store
	// Restored is the persisted state of a task found after an agent
	// restart; nil for a new task.
	Restored *clientstate.LocalTaskState
	// Prestart hooks run, in order, before the task starts (each until
	// it reports done: artifacts).
	Prestart []PrestartHook
	// TaskHook, when set, runs before the task first starts and keeps
	// working while it runs (templates; see TaskHook).
	TaskHook TaskHook
	// OnStateChange is called after every state change, without locks held.
	OnStateChange func(task string)
	Logger        hclog.Logger
	// Rand returns restart jitter in [0,n); nil = math/rand/v2.
	Rand func(n int64) int64
	// MaxKillTimeout caps the task's kill_timeout, as the client's
	// max_kill_timeout does in Nomad (0: no cap).
	MaxKillTimeout time.Duration
}

// TaskRunner runs one task.
type TaskRunner struct {
	cfg     Config
	logger  hclog.Logger
	tracker *Tracker

	mu      sync.Mutex
	state   *structs.TaskState
	handle  *driver.TaskHandle
	killing bool
	ran     bool
	// done names the prestart hooks whose work is done (persisted).
	done []string
	// replace is why a recovered task must be stopped and started
	// again instead of re-attached ("" = re-attach).
	replace string
	// persistMu orders snapshots and writes of the persisted state, so
	// an older snapshot (say, without the handle) never overwrites a
	// newer one.
	persistMu sync.Mutex

	killCh     chan struct{}
	restartCh  chan *restartRequest
	shutdownCh chan struct{}
	waitCh     chan struct{}
	closeOnce  sync.Once
	ctx        context.Context
	cancel     context.CancelFunc
}

// New returns a runner; nothing starts until Run.
func New(cfg Config) *TaskRunner {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.Int64N
	}
	job := cfg.Alloc.Job
	var tg *structs.TaskGroup
	if job != nil {
		tg = job.LookupTaskGroup(cfg.Alloc.TaskGroup)
	}
	policy := ResolveRestartPolicy(job, tg, cfg.Task)
	// Batch and sysbatch tasks and ephemeral lifecycle tasks (prestart/poststart/poststop
	// without sidecar) run to completion: exit 0 is done, not restarted.
	lc := cfg.Task.Lifecycle
	batch := job.RunsToCompletion() || (lc != nil && lc.Hook != "" && !lc.Sidecar)
	tracker := NewTracker(policy, batch, cfg.Rand)
	if lc != nil && lc.Sidecar && strings.HasPrefix(cfg.Task.Kind, connect.KindPrefix) {
		tracker = NewSidecarTracker(policy, cfg.Rand)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &TaskRunner{cfg: cfg, tracker: tracker,
		logger: cfg.Logger.With("alloc_id", cfg.Alloc.ID, "task", cfg.Task.Name),
		killCh: make(chan struct{}), restartCh: make(chan *restartRequest), shutdownCh: make(chan struct{}), waitCh: make(chan struct{}), ctx: ctx, cancel: cancel}
	if r := cfg.Restored; r != nil && r.State != nil {
		tr.state = copyState(r.State)
		tr.handle = r.Handle
		tr.done = slices.Clone(r.PrestartDone)
	} else {
		tr.state = &structs.TaskState{State: structs.TaskStatePending}
		tr.appendEvent(NewEvent(structs.TaskReceived))
		tr.persist()
	}
	return tr
}

// SetEnv sets the task's environment and network namespace once the
// allocation's hooks ran; call it before Run.
func (tr *TaskRunner) SetEnv(env *taskenv.Env, netNSPath string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.cfg.Env = env
	tr.cfg.NetNSPath = netNSPath
}

// Name is the task's name.
func (tr *TaskRunner) Name() string { return tr.cfg.Task.Name }

// Task is the task the runner runs.
func (tr *TaskRunner) Task() *structs.Task { return tr.cfg.Task }

// Driver is the task's driver.
func (tr *TaskRunner) Driver() driver.Driver { return tr.cfg.Driver }

// State returns a copy of the task's state.
func (tr *TaskRunner) State() *structs.TaskState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return copyState(tr.state)
}

// TaskID returns the driver's ID of the running task, "" when not running.
func (tr *TaskRunner) TaskID() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.handle == nil || tr.state.State != structs.TaskStateRunning {
		return ""
	}
	return tr.handle.Config.ID
}

// WaitCh is closed once the runner is done: the task is dead or the runner
// was shut down.
func (tr *TaskRunner) WaitCh() <-chan struct{} { return tr.waitCh }

// RestartRecovered makes Run stop the task it recovers and start it again
// (for reason, e.g. its network namespace was recreated) instead of
// re-attaching to it; this restart does not count against the restart
// policy. Call it before Run; a task without a recovered handle is
// started normally.
func (tr *TaskRunner) RestartRecovered(reason string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.replace = reason
}

// EmitEvent records ev in the task's events (e.g. a degraded restore).
func (tr *TaskRunner) EmitEvent(ev *structs.TaskEvent) { tr.emit(ev) }

// IsDead reports whether the task reached its final state.
func (tr *TaskRunner) IsDead() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.state.State == structs.TaskStateDead
}

// Kill stops the task: ev (a Killing event, or a sibling failure) is
// recorded, the driver stops the task with its kill_timeout and kill_signal,
// and Kill returns once the task is dead or ctx ends. A runner that never
// ran is marked dead at once.
func (tr *TaskRunner) Kill(ctx context.Context, ev *structs.TaskEvent) {
	tr.mu.Lock()
	if tr.killing {
		tr.mu.Unlock()
		tr.wait(ctx)
		return
	}
	tr.killing = true
	ran, dead := tr.ran, tr.state.State == structs.TaskStateDead
	handle := tr.handle
	running := handle != nil && tr.state.State == structs.TaskStateRunning
	// A recovered task that Run never reached still has a live process:
	// start the loop so it is re-attached and then stopped.
	startLoop := !ran && !dead && handle != nil
	if startLoop {
		tr.ran = true
	}
	tr.mu.Unlock()
	if dead {
		return
	}
	if !ran && !startLoop {
		tr.finish(ev, false)
		tr.closeOnce.Do(func() { close(tr.waitCh) })
		return
	}
	if running && tr.cfg.Task.ShutdownDelay > 0 {
		wev := NewEvent(TaskWaitingShutdownDelay)
		wev.DisplayMessage = fmt.Sprintf("Waiting for shutdown_delay of %v before killing the task.", tr.cfg.Task.ShutdownDelay)
		tr.emit(wev)
		select {
		case <-time.After(tr.cfg.Task.ShutdownDelay):
		case <-ctx.Done():
		}
	}
	if ev == nil {
		ev = KillingEvent(tr.killTimeout())
	}
	tr.emit(ev)
	close(tr.killCh)
	if startLoop {
		go tr.loop(handle)
	}
	tr.wait(ctx)
}

// MarkDead records ev and marks a task that never ran dead (failed when
// failed); used when a sibling or the allocation setup failed. A recovered
// task that is still running is stopped first.
func (tr *TaskRunner) MarkDead(ev *structs.TaskEvent, failed bool) {
	tr.mu.Lock()
	if tr.ran || tr.state.State == structs.TaskStateDead {
		tr.mu.Unlock()
		return
	}
	if tr.handle != nil {
		tr.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), tr.killTimeout()+stopGrace)
		defer cancel()
		tr.Kill(ctx, ev)
		if failed {
			tr.update(func(s *structs.TaskState) { s.Failed = true })
		}
		return
	}
	tr.killing = true
	tr.mu.Unlock()
	tr.finish(ev, failed)
	tr.closeOnce.Do(func() { close(tr.waitCh) })
}

// Shutdown detaches from the task without stopping it (agent shutdown): Run
// returns, the task keeps running and its persisted handle stays.
func (tr *TaskRunner) Shutdown() {
	select {
	case <-tr.shutdownCh:
	default:
		close(tr.shutdownCh)
	}
	tr.cancel()
	tr.mu.Lock()
	ran := tr.ran
	tr.mu.Unlock()
	if ran {
		<-tr.waitCh
	}
}

func (tr *TaskRunner) wait(ctx context.Context) {
	select {
	case <-tr.waitCh:
	case <-ctx.Done():
	}
}

// killTimeout is the task's kill_timeout (DefaultKillTimeout when unset),
// at most the client's MaxKillTimeout.
func (tr *TaskRunner) killTimeout() time.Duration {
	d := DefaultKillTimeout
	if tr.cfg.Task.KillTimeout != nil && *tr.cfg.Task.KillTimeout > 0 {
		d = *tr.cfg.Task.KillTimeout
	}
	if limit := tr.cfg.MaxKillTimeout; limit > 0 && d > limit {
		d = limit
	}
	return d
}

// appendEvent adds ev to the state; callers hold mu or own tr exclusively.
func (tr *TaskRunner) appendEvent(ev *structs.TaskEvent) {
	tr.state.Events = append(tr.state.Events, ev)
	if n := len(tr.state.Events); n > maxEvents {
		tr.state.Events = tr.state.Events[n-maxEvents:]
	}
}

// update applies fn to the state under the lock, then persists and notifies.
func (tr *TaskRunner) update(fn func(s *structs.TaskState)) {
	tr.mu.Lock()
	fn(tr.state)
	tr.mu.Unlock()
	tr.persist()
	if tr.cfg.OnStateChange != nil {
		tr.cfg.OnStateChange(tr.cfg.Task.Name)
	}
}

func (tr *TaskRunner) emit(ev *structs.TaskEvent) {
	tr.logger.Debug("task event", "type", ev.Type, "message", ev.DisplayMessage)
	tr.update(func(*structs.TaskState) { tr.appendEvent(ev) })
}

func (tr *TaskRunner) finish(ev *structs.TaskEvent, failed bool) {
	tr.update(func(s *structs.TaskState) {
		if ev != nil {
			tr.appendEvent(ev)
		}
		s.State = structs.TaskStateDead
		s.Failed = s.Failed || failed
		s.FinishedAt = time.Now()
	})
}

// persist writes the task's state and handle to the client state.
func (tr *TaskRunner) persist() {
	tr.persistMu.Lock()
	defer tr.persistMu.Unlock()
	tr.mu.Lock()
	ls := &clientstate.LocalTaskState{Handle: tr.handle, State: copyState(tr.state), PrestartDone: slices.Clone(tr.done)}
	tr.mu.Unlock()
	if tr.cfg.State == nil {
		return
	}
	if err := tr.cfg.State.PutTaskState(tr.cfg.Alloc.ID, tr.cfg.Task.Name, ls); err != nil {
		tr.logger.Error("failed to persist task state", "error", err)
	}
}

// taskConfig builds the driver's view of the task.
func (tr *TaskRunner) taskConfig() *driver.TaskConfig {
	t, a := tr.cfg.Task, tr.cfg.Alloc
	tr.mu.Lock()
	env, netns := tr.cfg.Env, tr.cfg.NetNSPath
	tr.mu.Unlock()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	cfg := &driver.TaskConfig{
		ID:         fmt.Sprintf("%s/%s/%s", a.ID, t.Name, hex.EncodeToString(suffix[:])),
		AllocID:    a.ID,
		Name:       t.Name,
		User:       t.User,
		TaskDir:    tr.cfg.TaskDir.Dir,
		AllocDir:   tr.cfg.AllocDir,
		StdoutPath: filepath.Join(tr.cfg.TaskDir.LogDir, t.Name+".stdout"),
		StderrPath: filepath.Join(tr.cfg.TaskDir.LogDir, t.Name+".stderr"),
		NetNSPath:  netns,
	}
	if a.Job != nil {
		cfg.JobName = a.Job.Name
	}
	if netns != "" {
		cfg.NetworkHostname = networkHostname(a, env)
	}
	if nw := groupNetwork(a); nw != nil && nw.DNS != nil {
		cfg.NetworkDNS = &driver.DNSConfig{Servers: nw.DNS.Servers, Searches: nw.DNS.Searches, Options: nw.DNS.Options}
	}
	if env != nil {
		cfg.Config = env.ParseConfig(t.Config)
		cfg.Env = env.Map()
	} else {
		cfg.Config = t.Config
		cfg.Env = t.Env
	}
	cfg.Env = tr.hookEnv(cfg.Env)
	if r := t.Resources; r != nil {
		cfg.Resources = &driver.Resources{}
		if r.CPU != nil {
			cfg.Resources.CPUShares = int64(*r.CPU)
		}
		if r.MemoryMB != nil {
			cfg.Resources.MemoryMB = int64(*r.MemoryMB)
		}
		if r.MemoryMaxMB != nil {
			cfg.Resources.MemoryMaxMB = int64(*r.MemoryMaxMB)
		}
	}
	if lc := t.LogConfig; lc != nil {
		if lc.MaxFiles != nil {
			cfg.LogMaxFiles = *lc.MaxFiles
		}
		if lc.MaxFileSizeMB != nil {
			cfg.LogMaxFileSizeMB = *lc.MaxFileSizeMB
		}
	}
	return cfg
}

// networkHostname is the allocation's group network's hostname,
// interpolated with the task's environment ("" if none).
func networkHostname(a *structs.Allocation, env *taskenv.Env) string {
	nw := groupNetwork(a)
	if nw == nil || nw.Hostname == "" {
		return ""
	}
	if env == nil {
		return nw.Hostname
	}
	return env.ReplaceEnv(nw.Hostname)
}

// groupNetwork is the allocation's group network block (nil if none).
func groupNetwork(a *structs.Allocation) *structs.NetworkResource {
	if a.Job == nil {
		return nil
	}
	tg := a.Job.LookupTaskGroup(a.TaskGroup)
	if tg == nil || len(tg.Networks) == 0 {
		return nil
	}
	return tg.Networks[0]
}
