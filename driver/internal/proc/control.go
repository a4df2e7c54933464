package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/launch"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// killWait bounds the wait for a task after SIGKILL (hang guard: the
// executor still has to drain output and record the exit).
const killWait = 30 * time.Second

// WaitTask implements driver.Driver. The channel yields the exit once and is
// closed; if ctx ends first it is closed without a value.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (<-chan *driver.ExitResult, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return nil, err
	}
	ch := make(chan *driver.ExitResult, 1)
	go func() {
		defer close(ch)
		select {
		case <-h.exited:
			ch <- h.result()
		case <-ctx.Done():
		}
	}()
	return ch, nil
}

// StopTask implements driver.Driver: signal (default SIGTERM) to the task's
// process group, then SIGKILL after timeout. A task already gone is success.
func (d *Driver) StopTask(taskID string, timeout time.Duration, signal string) error {
	h, err := d.lookup(taskID)
	if err != nil {
		return err
	}
	sig, err := launch.ParseSignal(signal, syscall.SIGTERM)
	if err != nil {
		return fmt.Errorf("failed to stop task %s: %w", taskID, err)
	}
	if !h.running() {
		return nil
	}
	if sig != syscall.SIGKILL {
		if err := h.signalGroup(sig); err != nil {
			return err
		}
		select {
		case <-h.exited:
			return nil
		case <-time.After(timeout):
			d.logger.Info("task did not stop in time; killing it", "task_id", taskID, "timeout", timeout)
		}
	}
	if err := h.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-h.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("failed to stop task %s: still running %s after SIGKILL", taskID, killWait)
	}
}

// DestroyTask implements driver.Driver: it forgets the task and removes its
// state. A running task is an error unless force, which kills it first.
func (d *Driver) DestroyTask(taskID string, force bool) error {
	h, err := d.lookup(taskID)
	if err != nil {
		return err
	}
	if h.running() {
		if !force {
			return fmt.Errorf("failed to destroy task %s: task is still running", taskID)
		}
		if err := d.StopTask(taskID, 0, "SIGKILL"); err != nil {
			return fmt.Errorf("failed to destroy task: %w", err)
		}
	}
	h.stopMonitor()
	d.tasks.delete(taskID)
	if err := os.RemoveAll(h.st.StateDir); err != nil {
		return fmt.Errorf("failed to remove task state: %w", err)
	}
	return nil
}

// InspectTask implements driver.Driver.
func (d *Driver) InspectTask(taskID string) (*driver.TaskStatus, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return nil, err
	}
	return h.status(), nil
}

// SignalTask implements driver.Driver; the signal goes to the task's main
// process only.
func (d *Driver) SignalTask(taskID string, signal string) error {
	h, err := d.lookup(taskID)
	if err != nil {
		return err
	}
	if signal == "" {
		return fmt.Errorf("failed to signal task %s: no signal given", taskID)
	}
	sig, err := launch.ParseSignal(signal, 0)
	if err != nil {
		return fmt.Errorf("failed to signal task %s: %w", taskID, err)
	}
	if !h.running() || !h.taskAlive() {
		return fmt.Errorf("failed to signal task %s: task is not running", taskID)
	}
	if err := syscall.Kill(h.st.TaskPID, sig); err != nil {
		return fmt.Errorf("failed to signal task %s: %w", taskID, err)
	}
	return nil
}

// TaskStats implements driver.Driver: CPU and RSS summed over the task's
// processes (its cgroup when it has one, else its process tree); memory
// usage from the cgroup when there is one.
func (d *Driver) TaskStats(ctx context.Context, taskID string) (*driver.TaskResourceUsage, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return nil, err
	}
	if !h.running() || !h.taskAlive() {
		return nil, fmt.Errorf("failed to sample task %s: task is not running", taskID)
	}
	u := &driver.TaskResourceUsage{Timestamp: time.Now()}
	if g := h.st.Cgroup; g != nil {
		u.PIDs, err = g.PIDs()
		if err != nil {
			return nil, fmt.Errorf("failed to sample task %s: %w", taskID, err)
		}
		u.MemoryUsage, _ = g.MemoryUsage()
	} else {
		u.PIDs = procfs.Tree(h.st.TaskPID)
	}
	page := uint64(os.Getpagesize())
	for _, pid := range u.PIDs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st, err := procfs.ReadStat(pid)
		if errors.Is(err, procfs.ErrNoProcess) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to sample task %s: %w", taskID, err)
		}
		u.CPUTotalNS += (st.UTime + st.STime) * uint64(time.Second) / procfs.ClockTicks
		u.MemoryRSS += uint64(max(st.RSSPages, 0)) * page
	}
	if u.MemoryUsage == 0 {
		u.MemoryUsage = u.MemoryRSS
	}
	return u, nil
}
