package taskrunner

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// stopGrace bounds how long Run waits for an exit after StopTask returned,
// beyond the kill timeout: a hang guard, not a timing expectation.
const stopGrace = 30 * time.Second

var errDetached = errors.New("task runner detached")

// Run drives the task until it is dead or the runner is shut down. Call it
// once, in its own goroutine.
func (tr *TaskRunner) Run() {
	tr.mu.Lock()
	if tr.ran {
		tr.mu.Unlock()
		return // Kill already started the loop to stop a recovered task
	}
	if tr.killing || tr.state.State == structs.TaskStateDead {
		tr.mu.Unlock()
		tr.closeOnce.Do(func() { close(tr.waitCh) })
		return
	}
	tr.ran = true
	handle := tr.handle
	tr.mu.Unlock()
	tr.loop(handle)
}

// loop starts or recovers the task and applies the restart policy until the
// task is dead or the runner detaches. The caller set tr.ran.
func (tr *TaskRunner) loop(handle *driver.TaskHandle) {
	defer tr.closeOnce.Do(func() { close(tr.waitCh) })
	if handle == nil && tr.skipStart() {
		return
	}
	if tr.cfg.Restored == nil {
		tr.emit(NewEvent(structs.TaskSetup))
	}
	if tr.cfg.TaskHook != nil {
		defer tr.cfg.TaskHook.Stop()
	}
	reason := tr.replaceReason()
	if tr.cfg.TaskHook != nil && handle == nil {
		// Artifacts before templates, as in Nomad (a template's source
		// may be a fetched file). A failure is left to the start below,
		// which runs the prestart hooks again under the restart policy.
		_ = tr.prestart()
	}
	if !tr.runTaskHook(handle != nil && reason == "") {
		return
	}
	if handle != nil && reason != "" {
		if !tr.replaceRecovered(handle, reason) {
			return
		}
		handle = nil
	}
	for {
		res, req, err := tr.runOnce(handle)
		if errors.Is(err, errDetached) {
			tr.logger.Debug("detached from task; it keeps running")
			return
		}
		handle = nil
		if req != nil {
			req.done <- nil
		}
		if tr.isKilling() {
			tr.finish(NewEvent(structs.TaskKilled), false)
			return
		}
		if req != nil && req.inPlace {
			tr.restartInPlace(req.reason)
			continue
		}
		if req != nil {
			res = signaledResult(res, req.reason)
		}
		d := tr.tracker.Next(time.Now(), res)
		if d.Restart && tr.skipStart() {
			return // e.g. a failed recovery: not started again either
		}
		if !d.Restart {
			if !d.Failed && d.Reason == "" {
				tr.finish(nil, false) // a batch task completed
				return
			}
			tr.logger.Info("not restarting task", "reason", d.Reason)
			tr.finish(notRestartingEvent(d), d.Failed)
			return
		}
		tr.logger.Info("restarting task", "delay", d.Delay)
		tr.update(func(s *structs.TaskState) {
			tr.appendEvent(restartingEvent(d))
			s.State = structs.TaskStatePending
			s.Restarts++
			s.LastRestart = time.Now()
		})
		select {
		case <-time.After(d.Delay):
		case <-tr.killCh:
			tr.finish(NewEvent(structs.TaskKilled), false)
			return
		case <-tr.shutdownCh:
			return
		}
	}
}

// stopping reports whether the task must not be started because its
// allocation's desired status is stop: a restored allocation whose stop was
// recorded before the agent restarted (one that arrives stopped never runs
// its tasks). A poststop task may start: it is part of the stop.
func (tr *TaskRunner) stopping() bool {
	lc := tr.cfg.Task.Lifecycle
	return tr.cfg.Alloc.DesiredStatus == structs.AllocDesiredStatusStop &&
		(lc == nil || lc.Hook != structs.TaskLifecycleHookPoststop)
}

// replaceReason is why a recovered task must be stopped and started again
// ("" = re-attach). A stopping task is killed where it runs instead: its
// replacement would be a start.
func (tr *TaskRunner) replaceReason() string {
	if tr.stopping() {
		return ""
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.replace
}

// skipStart marks the task dead instead of starting it when stopping.
func (tr *TaskRunner) skipStart() bool {
	if !tr.stopping() {
		return false
	}
	tr.logger.Info("not starting task: its allocation is stopping")
	tr.finish(NotStartedEvent(), false)
	return true
}

// replaceRecovered stops a recovered task so the loop starts it again; it
// returns false when the runner was shut down meanwhile.
func (tr *TaskRunner) replaceRecovered(h *driver.TaskHandle, reason string) bool {
	tr.logger.Info("restarting recovered task", "reason", reason)
	if h.Config != nil && tr.cfg.Driver.RecoverTask(h) == nil {
		if exitCh, err := tr.cfg.Driver.WaitTask(tr.ctx, h.Config.ID); err == nil {
			if err := tr.cfg.Driver.StopTask(h.Config.ID, tr.killTimeout(), tr.cfg.Task.KillSignal); err != nil {
				tr.logger.Warn("failed to stop recovered task", "error", err)
			}
			select {
			case <-exitCh:
			case <-time.After(tr.killTimeout() + stopGrace):
				tr.logger.Warn("recovered task did not exit after being stopped")
			case <-tr.shutdownCh:
				return false
			}
		}
	}
	tr.release(h)
	tr.update(func(s *structs.TaskState) {
		tr.appendEvent(restartingEvent(Decision{Restart: true, Reason: reason}))
		s.State = structs.TaskStatePending
		s.Restarts++
		s.LastRestart = time.Now()
	})
	return true
}

// runOnce starts (or, with a restored handle, recovers) the task and waits
// for it to exit. It returns errDetached when the runner was shut down, and
// the restart request that stopped the task, if one did.
func (tr *TaskRunner) runOnce(handle *driver.TaskHandle) (*driver.ExitResult, *restartRequest, error) {
	var exitCh <-chan *driver.ExitResult
	var res *driver.ExitResult
	var req *restartRequest
	if handle != nil {
		exitCh, res = tr.recover(handle)
	} else {
		if tr.isKilling() {
			return &driver.ExitResult{}, nil, nil
		}
		if err := tr.prestart(); err != nil {
			select {
			case <-tr.shutdownCh:
				return nil, nil, errDetached
			default:
			}
			return &driver.ExitResult{Err: err}, nil, nil
		}
		handle, exitCh, res = tr.start()
	}
	if exitCh != nil {
		var err error
		if res, req, err = tr.waitExit(handle, exitCh); err != nil {
			return nil, nil, err
		}
		tr.emit(terminatedEvent(res))
	}
	if handle != nil {
		tr.release(handle)
	}
	return res, req, nil
}

func (tr *TaskRunner) isKilling() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.killing
}

// start launches the task and persists its handle at once, in the same
// write as the running state.
func (tr *TaskRunner) start() (*driver.TaskHandle, <-chan *driver.ExitResult, *driver.ExitResult) {
	cfg := tr.taskConfig()
	h, err := tr.cfg.Driver.StartTask(cfg)
	if err != nil {
		tr.logger.Warn("failed to start task", "error", err)
		tr.emit(driverFailureEvent(err))
		return nil, nil, &driver.ExitResult{Err: err}
	}
	tr.update(func(s *structs.TaskState) {
		tr.handle = h
		tr.appendEvent(NewEvent(structs.TaskStarted))
		if h.Message != "" {
			tr.appendEvent(driverMessageEvent(h))
		}
		s.State = structs.TaskStateRunning
		s.StartedAt = time.Now()
	})
	tr.logger.Info("task started", "task_id", h.Config.ID)
	exitCh, err := tr.cfg.Driver.WaitTask(tr.ctx, h.Config.ID)
	if err != nil {
		err = fmt.Errorf("failed to wait for task: %w", err)
		tr.emit(driverFailureEvent(err))
		_ = tr.cfg.Driver.StopTask(h.Config.ID, tr.killTimeout(), tr.cfg.Task.KillSignal)
		return h, nil, &driver.ExitResult{Err: err}
	}
	return h, exitCh, nil
}

// recover re-attaches to a task a previous agent started.
func (tr *TaskRunner) recover(h *driver.TaskHandle) (<-chan *driver.ExitResult, *driver.ExitResult) {
	fail := func(err error) (<-chan *driver.ExitResult, *driver.ExitResult) {
		err = fmt.Errorf("failed to recover task: %w", err)
		tr.logger.Warn("task recovery failed; applying the restart policy", "error", err)
		tr.emit(driverFailureEvent(err))
		return nil, &driver.ExitResult{Err: err}
	}
	if h.Config == nil {
		return fail(errors.New("persisted handle has no task config"))
	}
	if err := tr.cfg.Driver.RecoverTask(h); err != nil {
		return fail(err)
	}
	exitCh, err := tr.cfg.Driver.WaitTask(tr.ctx, h.Config.ID)
	if err != nil {
		return fail(err)
	}
	tr.logger.Info("recovered task", "task_id", h.Config.ID)
	tr.update(func(s *structs.TaskState) { s.State = structs.TaskStateRunning })
	return exitCh, nil
}

// waitExit waits for the task's exit; a kill or a restart request stops
// it first (the request is returned).
func (tr *TaskRunner) waitExit(h *driver.TaskHandle, exitCh <-chan *driver.ExitResult) (*driver.ExitResult, *restartRequest, error) {
	var req *restartRequest
wait:
	for {
		select {
		case res := <-exitCh:
			res, err := tr.exitResult(res)
			return res, nil, err
		case <-tr.killCh:
			break wait
		case req = <-tr.restartCh:
			if req.taskID == h.Config.ID {
				break wait
			}
			req.done <- fmt.Errorf("failed to restart task %q: %w", tr.Name(), ErrNotRunning) // an earlier run
			req = nil
		case <-tr.shutdownCh:
			return nil, nil, errDetached
		}
	}
	if req != nil {
		tr.logger.Info("restarting task on request", "reason", req.reason)
		tr.emit(restartSignalEvent(req.reason))
	}
	res, err := tr.stop(h, exitCh)
	return res, req, err
}

// stop stops the task with its kill_signal and kill_timeout and waits for
// its exit.
func (tr *TaskRunner) stop(h *driver.TaskHandle, exitCh <-chan *driver.ExitResult) (*driver.ExitResult, error) {
	timeout := tr.killTimeout()
	if err := tr.cfg.Driver.StopTask(h.Config.ID, timeout, tr.cfg.Task.KillSignal); err != nil {
		tr.logger.Warn("failed to stop task", "error", err)
		ev := NewEvent(structs.TaskKilling)
		ev.KillError = err.Error()
		ev.DisplayMessage = "failed to stop task: " + err.Error()
		tr.emit(ev)
	}
	select {
	case res := <-exitCh:
		return tr.exitResult(res)
	case <-time.After(timeout + stopGrace):
		return &driver.ExitResult{Err: errors.New("task did not exit after being stopped")}, nil
	case <-tr.shutdownCh:
		return nil, errDetached
	}
}

func (tr *TaskRunner) exitResult(res *driver.ExitResult) (*driver.ExitResult, error) {
	if res != nil {
		return res, nil
	}
	select {
	case <-tr.shutdownCh:
		return nil, errDetached
	default:
		return &driver.ExitResult{Err: errors.New("driver closed the wait channel")}, nil
	}
}

// release forgets the exited task: the driver frees its resources and the
// persisted handle is cleared.
func (tr *TaskRunner) release(h *driver.TaskHandle) {
	if h.Config != nil {
		if err := tr.cfg.Driver.DestroyTask(h.Config.ID, true); err != nil && !errors.Is(err, driver.ErrTaskNotFound) {
			tr.logger.Warn("failed to destroy task", "error", err)
		}
	}
	tr.mu.Lock()
	tr.handle = nil
	tr.mu.Unlock()
	tr.persist()
}
