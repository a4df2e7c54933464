package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/launch"
)

// controlTimeout bounds one daemon call of a control operation.
const controlTimeout = 30 * time.Second

// ErrDestroyed is the exit error of a task destroyed before its exit was
// read.
var ErrDestroyed = errors.New("task destroyed before its exit was recorded")

// StopTask implements driver.Driver: signal to the container, then
// SIGKILL after timeout, as Nomad's docker driver. Without a signal (no
// kill_signal) it is the image's STOPSIGNAL, else SIGTERM, what `docker
// stop` sends. A container already stopped is success.
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
	if signal == "" {
		sig = d.stopSignal(h)
	}
	if sig != syscall.SIGKILL {
		if err := d.kill(h, sig); err != nil {
			return err
		}
		select {
		case <-h.exited:
			return nil
		case <-time.After(timeout):
			d.logger.Info("task did not stop in time; killing it", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name, "timeout", timeout)
		}
	}
	if err := d.kill(h, syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-h.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("failed to stop task %s: still running %s after SIGKILL", taskID, killWait)
	}
}

// stopSignal is the container's stop signal (its image's STOPSIGNAL),
// SIGTERM when it has none or it cannot be read.
func (d *Driver) stopSignal(h *taskHandle) syscall.Signal {
	c, err := d.docker()
	if err != nil {
		return syscall.SIGTERM
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	info, err := c.ContainerInspect(ctx, h.st.ContainerID)
	if err != nil || info.Config == nil || info.Config.StopSignal == "" {
		return syscall.SIGTERM
	}
	sig, err := launch.ParseSignal(info.Config.StopSignal, syscall.SIGTERM)
	if err != nil {
		d.logger.Warn("ignoring the container's stop signal", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name, "stop_signal", info.Config.StopSignal, "error", err)
		return syscall.SIGTERM
	}
	return sig
}

// kill sends sig to the container; a container that is no longer running
// is not an error.
func (d *Driver) kill(h *taskHandle, sig syscall.Signal) error {
	c, err := d.docker()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if err := c.ContainerKill(ctx, h.st.ContainerID, unix.SignalName(sig)); err != nil {
		if cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err) {
			return nil
		}
		if running, known := d.containerRunning(ctx, h.st.ContainerID); known && !running {
			return nil
		}
		return fmt.Errorf("failed to signal task %s: %w", h.cfg.ID, err)
	}
	return nil
}

// SignalTask implements driver.Driver.
func (d *Driver) SignalTask(taskID string, signal string) error {
	h, err := d.lookup(taskID)
	if err != nil {
		return err
	}
	sig, err := launch.ParseSignal(signal, 0)
	switch {
	case err != nil:
		return fmt.Errorf("failed to signal task %s: %w", taskID, err)
	case sig == 0:
		return fmt.Errorf("failed to signal task %s: invalid signal %q", taskID, signal)
	}
	if !h.running() {
		return fmt.Errorf("failed to signal task %s: task has exited", taskID)
	}
	return d.kill(h, sig)
}

// DestroyTask implements driver.Driver: it stops following the task and
// removes its container (unless gc { container = false }). A running task
// is an error unless force, which kills it. Waiters get the container's
// exit, or ErrDestroyed if it could not be read in time.
func (d *Driver) DestroyTask(taskID string, force bool) error {
	h, err := d.lookup(taskID)
	if err != nil {
		return err
	}
	if h.running() {
		running, known := d.containerRunning(context.Background(), h.st.ContainerID)
		switch {
		case !force && running:
			return fmt.Errorf("failed to destroy task %s: task is still running", taskID)
		case !force && !known:
			return fmt.Errorf("failed to destroy task %s: the docker daemon cannot tell whether it still runs", taskID)
		case running:
			if err := d.kill(h, syscall.SIGKILL); err != nil {
				return err
			}
		case !known:
			// Forced with the daemon unreachable: stop following it; the
			// dangling sweep removes the container once the daemon is back.
			d.logger.Warn("destroying a task whose container's state cannot be read", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name)
		}
		select { // let the monitor record the exit
		case <-h.exited:
		case <-time.After(drainTimeout):
		}
	}
	h.cancel()
	<-h.logsDone
	h.setExited(&driver.ExitResult{ExitCode: -1, Err: ErrDestroyed}, time.Now())
	if d.cfg.gcContainer() {
		d.removeContainer(h.st.ContainerID)
	}
	d.forget(taskID)
	d.images.release(h.st.Image, taskID)
	_ = removeFile(h.st.CursorFile)
	if h.cfg.NetNSPath != "" {
		d.releasePause(h.cfg.AllocID)
	}
	return nil
}

// removeContainer force-removes a container; a missing one is fine.
func (d *Driver) removeContainer(id string) {
	c, err := d.docker()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if err := c.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.logger.Warn("failed to remove container", "container_id", shortID(id), "error", err)
	}
}

// InspectTask implements driver.Driver.
func (d *Driver) InspectTask(taskID string) (*driver.TaskStatus, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return nil, err
	}
	return h.status(), nil
}

// TaskStats implements driver.Driver from one container stats sample.
func (d *Driver) TaskStats(ctx context.Context, taskID string) (*driver.TaskResourceUsage, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return nil, err
	}
	c, err := d.docker()
	if err != nil {
		return nil, err
	}
	resp, err := c.ContainerStatsOneShot(ctx, h.st.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("failed to read stats of task %s: %w", taskID, err)
	}
	defer resp.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("failed to decode stats of task %s: %w", taskID, err)
	}
	u := &driver.TaskResourceUsage{Timestamp: s.Read, CPUTotalNS: s.CPUStats.CPUUsage.TotalUsage, MemoryUsage: s.MemoryStats.Usage}
	if u.Timestamp.IsZero() {
		u.Timestamp = time.Now()
	}
	// cgroup v1 reports rss, v2 anon.
	if rss, ok := s.MemoryStats.Stats["rss"]; ok {
		u.MemoryRSS = rss
	} else {
		u.MemoryRSS = s.MemoryStats.Stats["anon"]
	}
	if pid := h.status().PID; pid > 0 {
		u.PIDs = []int{pid}
	}
	return u, nil
}

// Sweep implements driver.Sweeper: it removes the containers this driver
// labelled (tasks and pause containers) whose allocation known reports
// gone (allocations gone while the agent was down) and returns how many it
// removed. An unreachable daemon is not an error: there is nothing to sweep.
func (d *Driver) Sweep(ctx context.Context, known func(allocID string) bool) (int, error) {
	c, err := d.docker()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelAllocID))})
	if client.IsErrConnectionFailed(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("failed to list containers: %w", err)
	}
	defer d.images.scheduleIdle()
	removed := 0
	for _, ct := range list {
		alloc := ct.Labels[LabelAllocID]
		if owner := ct.Labels[LabelOwner]; alloc == "" || known(alloc) || (owner != "" && !d.owns(owner)) {
			// Another agent's container on a shared daemon: its own
			// sweep judges it (containers older than the owner label
			// have none and are judged here, as before).
			continue
		}
		d.logger.Info("removing container of a gone allocation", "alloc_id", alloc, "task", ct.Labels[LabelTask], "container_id", shortID(ct.ID))
		d.removeContainer(ct.ID)
		removed++
	}
	return removed, nil
}
