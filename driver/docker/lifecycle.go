package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/meshlet/meshlet/driver"
)

// Timings of the container lifecycle.
const (
	// startTimeout bounds making the pause container, create and start.
	startTimeout = 2 * time.Minute
	// killWait bounds the wait for a container after SIGKILL.
	killWait = 30 * time.Second
	// waitRetry is the pause before re-waiting on a container after the
	// daemon broke the wait (e.g. it restarted).
	waitRetry = time.Second
)

// StartTask implements driver.Driver: pull the image if needed, create and
// start the container, follow its logs. The handle's DriverState is the
// last thing made. A failure removes what was created.
func (d *Driver) StartTask(cfg *driver.TaskConfig) (th *driver.TaskHandle, err error) {
	tc, caps, err := d.prepare(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, configError(err))
	}
	c, err := d.docker()
	if err != nil {
		return nil, err
	}
	if err := d.reserve(cfg.ID); err != nil {
		return nil, err
	}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	joinAlloc := cfg.NetNSPath != "" && tc.NetworkMode == ""
	cleanup = append(cleanup, func() {
		d.forget(cfg.ID)
		if joinAlloc {
			d.releasePause(cfg.AllocID)
		}
	})
	// Held before the image is looked at, so image GC cannot remove it
	// between the check and the create.
	d.images.acquire(tc.Image, cfg.ID)
	cleanup = append(cleanup, func() { d.images.release(tc.Image, cfg.ID) })
	// The pull has its own bound (image_pull_timeout).
	if err := d.ensureImage(context.Background(), c, tc); err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	netMode := cmpOr(tc.NetworkMode, NetworkModeHost)
	var an *allocNet
	if joinAlloc {
		pauseID, err := d.ensurePause(ctx, c, cfg.AllocID, cfg.NetNSPath, cfg.NetworkHostname)
		if err != nil {
			return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, err)
		}
		netMode = "container:" + pauseID
		an = d.allocNetOf(ctx, c, pauseID, cfg)
	}
	cc, hc, err := d.containerSpec(cfg, tc, caps, netMode, an)
	if err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, configError(err))
	}
	if err := os.MkdirAll(d.cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create driver state dir: %w", err)
	}
	if err := d.removeStale(ctx, c, cfg); err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, err)
	}
	created, err := c.ContainerCreate(ctx, cc, hc, nil, nil, containerName(cfg))
	if err != nil {
		return nil, fmt.Errorf("failed to create container for task %s: %w", cfg.ID, err)
	}
	cleanup = append(cleanup, func() { d.removeContainer(created.ID) })
	if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("failed to start container for task %s: %w", cfg.ID, err)
	}
	st := &driverState{Version: handleVersion, ContainerID: created.ID, Image: tc.Image,
		StartedAt: time.Now().UTC(), CursorFile: cursorFile(d.cfg.StateDir, cfg.ID), TTY: tc.Options.TTY}
	_ = os.Remove(st.CursorFile) // a fresh container's logs start from the beginning
	state, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("failed to encode driver state: %w", err)
	}
	d.track(cfg, st)
	d.logger.Info("task started", "alloc_id", cfg.AllocID, "task", cfg.Name, "container_id", shortID(created.ID), "image", tc.Image)
	return &driver.TaskHandle{Version: handleVersion, Config: cfg, State: driver.TaskStateRunning, DriverState: state}, nil
}

// prepare parses and checks the task's config against the plugin config
// and the allocation's network.
func (d *Driver) prepare(cfg *driver.TaskConfig) (*taskConfig, []string, error) {
	tc, err := parseTaskConfig(cfg.Config)
	if err != nil {
		return nil, nil, err
	}
	caps, err := d.cfg.checkAllowed(tc)
	if err != nil {
		return nil, nil, err
	}
	if err := d.cfg.checkOptions(&tc.Options, cfg.NetNSPath != "" && tc.NetworkMode == ""); err != nil {
		return nil, nil, err
	}
	if cfg.NetNSPath != "" {
		switch tc.NetworkMode {
		case NetworkModeHost:
			return nil, nil, fmt.Errorf("%w: network_mode \"host\" would leave the allocation's network namespace", ErrBadConfig)
		case "":
			if err := pauseSupported(); err != nil {
				return nil, nil, err
			}
		}
	}
	return tc, caps, nil
}

// track registers a started or recovered task and starts its monitor and
// log copier.
func (d *Driver) track(cfg *driver.TaskConfig, st *driverState) *taskHandle {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHandle(cfg, st, cancel)
	d.set(cfg.ID, h)
	go d.copyLogs(ctx, h)
	go d.monitor(ctx, h)
	return h
}

// RecoverTask implements driver.Driver: it re-attaches to the container
// named in the handle, resuming its logs after the last line copied. A
// container that is gone is an error (the task is lost); one that exited
// while the agent was down reports that exit. With the daemon unreachable
// the task is kept and followed once the daemon answers again.
func (d *Driver) RecoverTask(th *driver.TaskHandle) error {
	if th == nil || th.Config == nil {
		return errors.New("failed to recover task: empty handle")
	}
	if h, _ := d.lookup(th.Config.ID); h != nil {
		return nil
	}
	if th.Version != handleVersion {
		return fmt.Errorf("task handle version %d: %w", th.Version, driver.ErrHandleVersion)
	}
	st, err := decodeState(th.DriverState)
	if err != nil {
		return err
	}
	c, err := d.docker()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), fingerprintTimeout)
	defer cancel()
	if _, err := c.ContainerInspect(ctx, st.ContainerID); client.IsErrConnectionFailed(err) {
		// The daemon is down (restarting?), not the container: follow it
		// once the daemon is back rather than start a second one.
		d.logger.Warn("docker daemon unreachable; re-attaching to the container once it answers",
			"alloc_id", th.Config.AllocID, "task", th.Config.Name, "error", err)
	} else if err != nil {
		return fmt.Errorf("failed to recover task %s: container %s: %w", th.Config.ID, shortID(st.ContainerID), err)
	}
	if err := d.reserve(th.Config.ID); err != nil {
		return nil // recovered concurrently
	}
	d.images.acquire(st.Image, th.Config.ID)
	d.track(th.Config, st)
	d.logger.Info("task recovered", "alloc_id", th.Config.AllocID, "task", th.Config.Name, "container_id", shortID(st.ContainerID))
	return nil
}

// monitor waits for the container to stop, then records its exit once the
// log copier drained (or drainTimeout passed).
func (d *Driver) monitor(ctx context.Context, h *taskHandle) {
	c, err := d.docker()
	if err != nil {
		h.setExited(&driver.ExitResult{ExitCode: -1, Err: err}, time.Now())
		return
	}
	for {
		info, err := c.ContainerInspect(ctx, h.st.ContainerID)
		if err == nil && info.State != nil {
			h.mu.Lock()
			h.pid = info.State.Pid
			h.mu.Unlock()
		}
		waitCh, errCh := c.ContainerWait(ctx, h.st.ContainerID, container.WaitConditionNotRunning)
		select {
		case <-waitCh:
			d.recordExit(ctx, c, h)
			return
		case err = <-errCh:
		}
		if ctx.Err() != nil {
			return
		}
		if cerrdefs.IsNotFound(err) {
			h.setExited(&driver.ExitResult{ExitCode: -1, Err: fmt.Errorf("container %s is gone: %w", shortID(h.st.ContainerID), err)}, time.Now())
			return
		}
		d.logger.Warn("waiting on container failed; retrying", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(waitRetry):
		}
	}
}

// recordExit reads the exit code, OOM kill and finish time from inspect.
func (d *Driver) recordExit(ctx context.Context, c *client.Client, h *taskHandle) {
	res := &driver.ExitResult{}
	at := time.Now()
	info, err := c.ContainerInspect(ctx, h.st.ContainerID)
	switch {
	case err != nil:
		res.ExitCode, res.Err = -1, fmt.Errorf("failed to inspect exited container: %w", err)
	case info.State != nil:
		res.ExitCode, res.OOMKilled = info.State.ExitCode, info.State.OOMKilled
		if info.State.Error != "" {
			res.Err = errors.New(info.State.Error)
		}
		if t, err := time.Parse(time.RFC3339Nano, info.State.FinishedAt); err == nil && !t.IsZero() {
			at = t
		}
	}
	select {
	case <-h.logsDone:
	case <-time.After(drainTimeout):
		d.logger.Warn("container output still open after exit", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name)
	case <-ctx.Done():
		return
	}
	d.logger.Info("task exited", "alloc_id", h.cfg.AllocID, "task", h.cfg.Name, "exit_code", res.ExitCode, "oom_killed", res.OOMKilled)
	h.setExited(res, at)
}

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

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
