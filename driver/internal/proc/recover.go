package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// RecoverTask implements driver.Driver. Order: already known? → decode the
// payload → check the real processes → rebuild the handle → register it →
// restart the monitor. A task that exited while no agent ran is recovered
// in the exited state with its recorded exit.
func (d *Driver) RecoverTask(th *driver.TaskHandle) error {
	if th == nil || th.Config == nil || th.Config.ID == "" {
		return errors.New("failed to recover task: handle has no task config")
	}
	id := th.Config.ID
	if d.tasks.get(id) != nil {
		return nil
	}
	if th.Version != handleVersion {
		return fmt.Errorf("failed to recover task %s: handle version %d: %w", id, th.Version, driver.ErrHandleVersion)
	}
	st, err := decodeState(th.DriverState)
	if err != nil {
		return fmt.Errorf("failed to recover task %s: %w", id, err)
	}
	if err := d.tasks.reserve(id); err != nil {
		return nil // recovered concurrently
	}
	h := newHandle(th.Config, st)
	switch {
	case d.exitRecorded(h):
	case procfs.Alive(st.ExecutorPID, st.ExecutorStartTime):
		go d.monitorPidfd(h)
	case d.exitRecorded(h): // the executor finished between the two checks
	default:
		d.tasks.delete(id)
		d.abandon(h)
		return fmt.Errorf("failed to recover task %s: its executor is gone and the task's exit was not recorded", id)
	}
	d.tasks.set(id, h)
	d.logger.Info("task recovered", "task_id", id, "pid", st.TaskPID, "running", h.running())
	return nil
}

// exitRecorded marks h exited if its exit file exists.
func (d *Driver) exitRecorded(h *taskHandle) bool {
	if _, err := os.Stat(h.st.ExitFile); err != nil {
		return false
	}
	h.setExited(h.exitFromFile(nil))
	return true
}

// abandon kills what is left of a task whose executor died and removes its
// state: without an executor nobody would record its exit or rotate logs.
func (d *Driver) abandon(h *taskHandle) {
	if err := h.signalGroup(syscall.SIGKILL); err != nil {
		d.logger.Warn("failed to kill orphaned task", "task_id", h.cfg.ID, "error", err)
	}
	if h.st.Cgroup != nil {
		if err := h.st.Cgroup.Destroy(); err != nil {
			d.logger.Warn("failed to remove orphaned cgroup", "task_id", h.cfg.ID, "error", err)
		}
	}
	_ = os.RemoveAll(h.st.StateDir)
}

// monitorChild waits for an executor this process started (and must reap).
func (d *Driver) monitorChild(h *taskHandle, cmd *exec.Cmd) {
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		err = fmt.Errorf("executor exited with %s", exitErr.ProcessState)
	}
	d.finish(h, err)
}

// finish records the task's exit once its executor is gone. An executor
// that died without recording the exit leaves an orphan nobody supervises
// (no exit record, no log rotation): it is killed.
func (d *Driver) finish(h *taskHandle, cause error) {
	res, at := h.exitFromFile(cause)
	if res.Err != nil && h.taskAlive() {
		d.logger.Warn("executor died; killing its task", "task_id", h.cfg.ID, "error", res.Err)
		if err := h.signalGroup(syscall.SIGKILL); err != nil {
			d.logger.Warn("failed to kill orphaned task", "task_id", h.cfg.ID, "error", err)
		}
	}
	d.logger.Info("task exited", "task_id", h.cfg.ID, "exit_code", res.ExitCode, "signal", res.Signal)
	h.setExited(res, at)
}

// monitorPidfd waits for an executor started by an earlier agent process:
// it is not our child, so it is watched through a pidfd (or, on kernels
// without pidfd_open, by polling /proc).
func (d *Driver) monitorPidfd(h *taskHandle) {
	if err := waitExit(h.st.ExecutorPID, h.st.ExecutorStartTime, h.stop); err != nil {
		return // stopped by DestroyTask
	}
	d.finish(h, nil)
}

var errStopped = errors.New("monitor stopped")

// waitExit blocks until the process (pid, startTime) has exited or stop is
// closed (errStopped).
func waitExit(pid int, startTime uint64, stop <-chan struct{}) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return pollExit(pid, startTime, stop)
	}
	defer unix.Close(fd)
	// The pidfd now pins whichever process holds pid; make sure it is ours.
	if st, err := procfs.ReadStat(pid); err != nil || st.StartTime != startTime {
		return nil
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		select {
		case <-stop:
			return errStopped
		default:
		}
		n, err := unix.Poll(fds, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return pollExit(pid, startTime, stop)
		}
		if n > 0 {
			return nil
		}
	}
}

// pollExit is the fallback when pidfds are unavailable.
func pollExit(pid int, startTime uint64, stop <-chan struct{}) error {
	for procfs.Alive(pid, startTime) {
		select {
		case <-stop:
			return errStopped
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
