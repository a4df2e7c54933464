package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// handleVersion is the version of driverState (and of driver.TaskHandle).
const handleVersion = 1

// driverState is the recovery payload kept in driver.TaskHandle.DriverState.
// PIDs come with their /proc start times so a recycled PID is never taken
// for the task.
type driverState struct {
	Version           int            `json:"version"`
	ExecutorPID       int            `json:"executor_pid"`
	ExecutorStartTime uint64         `json:"executor_start_time"`
	TaskPID           int            `json:"task_pid"`
	TaskStartTime     uint64         `json:"task_start_time"`
	StartedAt         time.Time      `json:"started_at"`
	StateDir          string         `json:"state_dir"`
	ExitFile          string         `json:"exit_file"`
	Command           string         `json:"command"`
	Args              []string       `json:"args,omitempty"`
	Cgroup            *cgroups.Group `json:"cgroup,omitempty"`
	// Isolated: the task runs chrooted in its own namespaces (a payload
	// from before isolation existed decodes as false).
	Isolated bool `json:"isolated,omitempty"`
	// Caps and AddedCaps are an isolated task's bounding set and cap_add
	// capabilities, for exec sessions. Caps has no omitempty: an empty set
	// (cap_drop = ["all"]) must not read as a payload from before tasks
	// had their own set (nil), which gets the driver's default set.
	Caps      []string `json:"caps"`
	AddedCaps []string `json:"added_caps,omitempty"`
}

func decodeState(b []byte) (*driverState, error) {
	var st driverState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("failed to decode driver state: %w", err)
	}
	if st.Version != handleVersion {
		return nil, fmt.Errorf("driver state version %d: %w", st.Version, driver.ErrHandleVersion)
	}
	if st.TaskPID <= 0 || st.ExecutorPID <= 0 || st.ExitFile == "" || st.StateDir == "" {
		return nil, errors.New("failed to decode driver state: missing pids or paths")
	}
	return &st, nil
}

// taskHandle is one task. cfg and st never change; mu guards the rest.
type taskHandle struct {
	cfg    *driver.TaskConfig
	st     *driverState
	exited chan struct{} // closed once exit is set
	stop   chan struct{} // closed by DestroyTask to end a pidfd monitor
	once   sync.Once     // guards close(exited)
	stopMu sync.Once     // guards close(stop)

	execs execGroups // exec sessions' process groups, killed at the exit

	mu          sync.RWMutex
	completedAt time.Time
	exit        *driver.ExitResult
}

func newHandle(cfg *driver.TaskConfig, st *driverState) *taskHandle {
	return &taskHandle{cfg: cfg, st: st, exited: make(chan struct{}), stop: make(chan struct{})}
}

// setExited records the exit once, kills what is left of the task's exec
// sessions, and wakes the waiters.
func (h *taskHandle) setExited(res *driver.ExitResult, at time.Time) {
	h.once.Do(func() {
		h.execs.killAll()
		h.mu.Lock()
		h.exit, h.completedAt = res, at
		h.mu.Unlock()
		close(h.exited)
	})
}

// stopMonitor ends a pidfd monitor (idempotent).
func (h *taskHandle) stopMonitor() {
	h.stopMu.Do(func() { close(h.stop) })
}

func (h *taskHandle) running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

func (h *taskHandle) result() *driver.ExitResult {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.exit == nil {
		return nil
	}
	r := *h.exit
	return &r
}

func (h *taskHandle) status() *driver.TaskStatus {
	h.mu.RLock()
	defer h.mu.RUnlock()
	s := &driver.TaskStatus{
		ID:        h.cfg.ID,
		Name:      h.cfg.Name,
		State:     driver.TaskStateRunning,
		StartedAt: h.st.StartedAt,
		PID:       h.st.TaskPID,
	}
	if h.exit != nil {
		r := *h.exit
		s.State, s.CompletedAt, s.ExitResult = driver.TaskStateExited, h.completedAt, &r
	}
	return s
}

// taskAlive reports whether the task's leader is still the process we
// started (not exited, PID not recycled).
func (h *taskHandle) taskAlive() bool {
	return procfs.Alive(h.st.TaskPID, h.st.TaskStartTime)
}

// signalGroup signals the task's process group, if its leader still lives.
func (h *taskHandle) signalGroup(sig syscall.Signal) error {
	if !h.taskAlive() {
		return nil
	}
	if err := syscall.Kill(-h.st.TaskPID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("failed to signal task %s: %w", h.cfg.ID, err)
	}
	return nil
}

// exitFromFile turns the executor's exit file into an ExitResult. cause is
// why we looked (e.g. the executor's wait error) and is reported when the
// file is missing.
func (h *taskHandle) exitFromFile(cause error) (*driver.ExitResult, time.Time) {
	st, err := executor.ReadExitStatus(h.st.ExitFile)
	if err != nil {
		if cause != nil {
			err = fmt.Errorf("%w (executor: %w)", err, cause)
		}
		return &driver.ExitResult{ExitCode: -1, Err: fmt.Errorf("executor exited without recording the task's exit: %w", err)}, time.Now()
	}
	res := &driver.ExitResult{ExitCode: st.ExitCode, Signal: st.Signal, OOMKilled: st.OOMKilled}
	if st.Error != "" {
		res.Err = errors.New(st.Error)
	}
	return res, st.ExitedAt
}

// taskStore is the driver's tasks behind an RWMutex. A nil entry reserves
// an ID while its StartTask runs.
type taskStore struct {
	mu    sync.RWMutex
	tasks map[string]*taskHandle
}

func newTaskStore() *taskStore { return &taskStore{tasks: map[string]*taskHandle{}} }

func (s *taskStore) get(id string) *taskHandle {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tasks[id]
}

// reserve claims id for a StartTask or RecoverTask in progress.
func (s *taskStore) reserve(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[id]; ok {
		return fmt.Errorf("task %q: %w", id, driver.ErrTaskExists)
	}
	s.tasks[id] = nil
	return nil
}

func (s *taskStore) set(id string, h *taskHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[id] = h
}

func (s *taskStore) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}
