package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// ErrNotRunning is returned by Restart when the task is not running.
var ErrNotRunning = errors.New("task not running")

// restartRequest asks the run loop to restart the running task taskID.
type restartRequest struct {
	taskID string
	reason string
	// inPlace: start the task again at once, outside the restart policy.
	inPlace bool
	done    chan error // buffered: the loop never waits on it
}

// Restart restarts the running task, as Nomad's check_restart does: the
// run loop records a "Restart Signaled" event with reason, stops the task
// with its kill_signal and kill_timeout, and applies the restart policy as
// after a failure, whatever the exit code (a batch task that exits 0 is
// started again, and the restart counts against the policy's attempts).
// Restart returns once the task has exited, or when ctx ends; it fails with
// ErrNotRunning when the task is not running (starting, waiting for a
// restart, dead or being killed).
func (tr *TaskRunner) Restart(ctx context.Context, reason string) error {
	return tr.restart(ctx, reason, false)
}

// RestartInPlace restarts the running task as Restart does, except that
// the task starts again at once and the restart does not count against
// the restart policy: the restart is not a failure (Nomad's restart of a
// task whose template changed).
func (tr *TaskRunner) RestartInPlace(ctx context.Context, reason string) error {
	return tr.restart(ctx, reason, true)
}

// restartInPlace records the restart of a task stopped by RestartInPlace.
func (tr *TaskRunner) restartInPlace(reason string) {
	tr.logger.Info("restarting task in place", "reason", reason)
	tr.update(func(s *structs.TaskState) {
		tr.appendEvent(restartingEvent(Decision{Restart: true, Reason: reason}))
		s.State = structs.TaskStatePending
		s.Restarts++
		s.LastRestart = time.Now()
	})
}

func (tr *TaskRunner) restart(ctx context.Context, reason string, inPlace bool) error {
	id := tr.TaskID()
	if id == "" || tr.isKilling() {
		return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ErrNotRunning)
	}
	req := &restartRequest{taskID: id, reason: reason, inPlace: inPlace, done: make(chan error, 1)}
	select {
	case tr.restartCh <- req:
	case <-tr.killCh:
		return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ErrNotRunning)
	case <-tr.waitCh:
		return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ErrNotRunning)
	case <-ctx.Done():
		return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ctx.Err())
	}
	select {
	case err := <-req.done:
		return err
	case <-tr.waitCh:
		return fmt.Errorf("failed to restart task %q: the task runner stopped", tr.Name())
	case <-ctx.Done():
		return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ctx.Err())
	}
}

// restartSignalEvent is Nomad's "Restart Signaled" with the reason.
func restartSignalEvent(reason string) *structs.TaskEvent {
	ev := NewEvent(structs.TaskRestartSignal)
	ev.RestartReason = reason
	ev.DisplayMessage = reason
	if reason == "" {
		ev.DisplayMessage = "Task signaled to restart"
	}
	return ev
}

// signaledResult makes the exit of a task stopped by Restart a failure for
// the restart policy, keeping its code and signal.
func signaledResult(res *driver.ExitResult, reason string) *driver.ExitResult {
	out := driver.ExitResult{}
	if res != nil {
		out = *res
	}
	out.Err = errors.Join(out.Err, fmt.Errorf("restart signaled: %s", reason))
	return &out
}
