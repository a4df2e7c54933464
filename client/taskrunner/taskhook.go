package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/structs"
)

// TaskHook prepares a task before it first starts and may keep
// working while it runs (the template hook renders files, then watches
// their data and restarts or signals the task).
type TaskHook interface {
	// Prestart runs once, on the runner's goroutine, before the task
	// first starts or is recovered; it may block until ctx ends (a kill
	// or an agent shutdown).
	Prestart(ctx context.Context, req TaskHookRequest) error
	// Env is added to the task's environment at every start.
	Env() map[string]string
	// Stop ends the hook's background work; it is called once the run
	// loop returns (the task is dead or the runner detached).
	Stop()
}

// TaskHookRequest is what a TaskHook gets.
type TaskHookRequest struct {
	// Env is the task's environment, as the driver will get it.
	Env *taskenv.Env
	// Restored: the task is being recovered after an agent restart and
	// may be running already; the hook must not block it.
	Restored bool
	// Task is the runner, for restarts, signals and events.
	Task *TaskRunner
}

// runTaskHook runs the task hook, if any. It returns false when the loop must
// end: the task was killed or failed its setup (it is then dead), or the
// runner was shut down. A recovered task that the hook fails keeps
// running, degraded.
func (tr *TaskRunner) runTaskHook(restored bool) bool {
	h := tr.cfg.TaskHook
	if h == nil {
		return true
	}
	ctx, cancel := tr.killableContext()
	defer cancel()
	tr.mu.Lock()
	env := tr.cfg.Env
	tr.mu.Unlock()
	err := h.Prestart(ctx, TaskHookRequest{Env: env, Restored: restored, Task: tr})
	switch {
	case err == nil:
		return true
	case tr.isKilling():
		tr.finish(NewEvent(structs.TaskKilled), false)
		return false
	case errors.Is(err, context.Canceled):
		return false // detached: the next agent runs the hook again
	case restored:
		// The task runs: failing it because its hook cannot start again
		// would be worse than running without the hook.
		tr.logger.Error("task prestart failed on restore; the task keeps running", "error", err)
		tr.emit(RestoreDegradedEvent(err))
		return true
	}
	tr.logger.Error("task prestart failed", "error", err)
	tr.finish(SetupFailureEvent(fmt.Errorf("failed to prepare task: %w", err)), true)
	return false
}

// hookEnv merges the prestart hook's variables over env.
func (tr *TaskRunner) hookEnv(env map[string]string) map[string]string {
	if tr.cfg.TaskHook == nil {
		return env
	}
	extra := tr.cfg.TaskHook.Env()
	if len(extra) == 0 {
		return env
	}
	out := make(map[string]string, len(env)+len(extra))
	maps.Copy(out, env)
	maps.Copy(out, extra)
	return out
}

// Signal records ev (a Signaling event saying why) and sends sig to the
// running task; it fails with ErrNotRunning when the task is not running.
func (tr *TaskRunner) Signal(ev *structs.TaskEvent, sig string) error {
	id := tr.TaskID()
	if id == "" || tr.isKilling() {
		return fmt.Errorf("failed to signal task %q: %w", tr.Name(), ErrNotRunning)
	}
	if ev != nil {
		tr.emit(ev)
	}
	if err := tr.cfg.Driver.SignalTask(id, sig); err != nil {
		return fmt.Errorf("failed to signal task %q with %s: %w", tr.Name(), sig, err)
	}
	return nil
}
