package connectproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/meshlet/meshlet/driver"
)

// Task event details of the runtime choice (a "Driver" task event).
const (
	// DetailRuntime is the runtime that runs the sidecar.
	DetailRuntime = "sidecar_runtime"
	// DetailProxy names the sidecar's data plane as `alloc status` shows it.
	DetailProxy = "sidecar_proxy"
)

// StartTask implements driver.Driver: it checks the task's config, then
// starts the sidecar on the first runtime of the node's order (or the one
// the task's mode forces) that can run it here; a docker runtime whose
// image pull fails passes to the next. The handle's Message says which
// runtime runs it and why earlier ones were skipped.
func (d *Driver) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	tc, err := d.check(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, driver.Unrecoverable(err))
	}
	order := taskOrder(tc.Mode, d.cfg.Runtimes)
	r, h, skipped, err := firstRuntime(order, func(r string) error { return d.probe(cfg, r) },
		func(r string) (*driver.TaskHandle, error) { return d.startOn(cfg, tc, r) },
		func(r string, err error) bool {
			pass := r == RuntimeDocker && isPullFailure(err)
			if pass {
				d.logger.Warn("sidecar image pull failed; trying the next runtime", "alloc_id", cfg.AllocID, "task", cfg.Name, "error", err)
			}
			return pass
		})
	switch {
	case err != nil:
		return nil, err
	case r == "":
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, noRuntimeError(order, skipped))
	}
	d.note(h, cfg, r, skipped)
	return h, nil
}

// check parses and confines the task's config (launch does it again, with
// its namespace check, for the executor's runtimes).
func (d *Driver) check(cfg *driver.TaskConfig) (*TaskConfig, error) {
	tc, err := ParseConfig(cfg.Config)
	if err != nil {
		return nil, err
	}
	if err := d.confine(cfg, tc); err != nil {
		return nil, err
	}
	return tc, nil
}

// probe returns why runtime r cannot run the task here, or nil.
func (d *Driver) probe(cfg *driver.TaskConfig, r string) error {
	switch r {
	case RuntimeDocker:
		return d.probeDocker(context.Background(), cfg)
	case RuntimeEnvoy:
		if d.cfg.EnvoyBinary == "" {
			return fmt.Errorf("no envoy binary on this node")
		}
	}
	return nil
}

// startOn starts the sidecar on runtime r: the container, or `meshlet
// connect sidecar` under the executor with its mode set to r.
func (d *Driver) startOn(cfg *driver.TaskConfig, tc *TaskConfig, r string) (*driver.TaskHandle, error) {
	if r == RuntimeDocker {
		return d.startContainer(cfg, tc)
	}
	pcfg := *cfg
	pcfg.Config = maps.Clone(cfg.Config)
	pcfg.Config[keyMode] = r // RuntimeEnvoy and RuntimeBuiltin are the modes' names
	h, err := d.Driver.StartTask(&pcfg)
	if err != nil {
		return nil, err
	}
	h.Config = cfg
	return h, nil
}

// note records the runtime choice on the handle (a task event) and in the
// log.
func (d *Driver) note(h *driver.TaskHandle, cfg *driver.TaskConfig, r string, skipped []string) {
	proxy := d.proxyLabel(r)
	h.Message = "Sidecar runtime: " + r + " (" + proxy + ")"
	if len(skipped) > 0 {
		h.Message += "; skipped " + strings.Join(skipped, "; ")
	}
	h.MessageDetails = map[string]string{DetailRuntime: r, DetailProxy: proxy}
	d.logger.Info("sidecar runtime chosen", "alloc_id", cfg.AllocID, "task", cfg.Name, "runtime", r, "skipped", strings.Join(skipped, "; "))
}

// proxyLabel names runtime r's data plane as `alloc status` shows it.
func (d *Driver) proxyLabel(r string) string {
	switch r {
	case RuntimeDocker:
		return fmt.Sprintf("Envoy container (%s)", d.cfg.EnvoyImage)
	case RuntimeEnvoy:
		return fmt.Sprintf("Envoy (%s)", d.cfg.EnvoyBinary)
	}
	return "built-in (meshlet connect proxy)"
}

// RecoverTask implements driver.Driver: a container sidecar goes back to
// the docker driver, any other to the executor.
func (d *Driver) RecoverTask(h *driver.TaskHandle) error {
	if h != nil && h.Config != nil {
		if cs, ok := decodeContainerState(h.DriverState); ok {
			return d.recoverContainer(h, cs)
		}
	}
	return d.Driver.RecoverTask(h)
}

// WaitTask implements driver.Driver.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (<-chan *driver.ExitResult, error) {
	return d.target(taskID).WaitTask(ctx, taskID)
}

// StopTask implements driver.Driver.
func (d *Driver) StopTask(taskID string, timeout time.Duration, signal string) error {
	return d.target(taskID).StopTask(taskID, timeout, signal)
}

// DestroyTask implements driver.Driver; a container sidecar is forgotten
// once the docker driver released it (or no longer knows it).
func (d *Driver) DestroyTask(taskID string, force bool) error {
	err := d.target(taskID).DestroyTask(taskID, force)
	if err == nil || errors.Is(err, driver.ErrTaskNotFound) {
		d.setContainer(taskID, false)
	}
	return err
}

// InspectTask implements driver.Driver.
func (d *Driver) InspectTask(taskID string) (*driver.TaskStatus, error) {
	return d.target(taskID).InspectTask(taskID)
}

// TaskStats implements driver.Driver.
func (d *Driver) TaskStats(ctx context.Context, taskID string) (*driver.TaskResourceUsage, error) {
	return d.target(taskID).TaskStats(ctx, taskID)
}

// SignalTask implements driver.Driver.
func (d *Driver) SignalTask(taskID string, signal string) error {
	return d.target(taskID).SignalTask(taskID, signal)
}

// ExecTask implements driver.Driver.
func (d *Driver) ExecTask(taskID string, cmd []string, timeout time.Duration) (*driver.ExecResult, error) {
	return d.target(taskID).ExecTask(taskID, cmd, timeout)
}

// ExecTaskStreaming implements driver.StreamingExecer.
func (d *Driver) ExecTaskStreaming(ctx context.Context, taskID string, opts *driver.ExecOptions) (int, error) {
	return d.target(taskID).ExecTaskStreaming(ctx, taskID, opts)
}

// runtimesAvailable are the runtimes of the node's order that can run a
// sidecar now (the node attribute driver.connect_proxy.runtimes).
func (d *Driver) runtimesAvailable(ctx context.Context) []string {
	usable, _ := candidates(d.cfg.Runtimes, func(r string) error {
		if r == RuntimeDocker {
			return d.probeDocker(ctx, nil)
		}
		return d.probe(nil, r)
	})
	return usable
}
