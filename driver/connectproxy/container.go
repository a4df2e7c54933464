package connectproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
)

// ContainerDriver is what the docker runtime needs of the node's docker
// driver (a *docker.Driver): the driver interface, streamed exec, and
// whether an image is present.
type ContainerDriver interface {
	driver.Driver
	driver.StreamingExecer
	// Ping returns nil when the daemon answers.
	Ping(ctx context.Context) error
	ImagePresent(ctx context.Context, image string) (bool, error)
}

// execDriver is a runtime's driver: proc's for envoy and builtin, docker's
// for the container.
type execDriver interface {
	driver.Driver
	driver.StreamingExecer
}

// containerStateVersion versions containerState.
const containerStateVersion = 1

// containerState is the DriverState of a sidecar run as a container: the
// docker task's config and handle, so RecoverTask hands them back to the
// docker driver after an agent restart.
type containerState struct {
	Runtime       string             `json:"sidecar_runtime"`
	Version       int                `json:"version"`
	Config        *driver.TaskConfig `json:"config"`
	HandleVersion int                `json:"handle_version"`
	State         json.RawMessage    `json:"state"`
}

// decodeContainerState returns the container state of a handle, or false
// for a handle of a sidecar run by the executor (envoy or builtin).
func decodeContainerState(b []byte) (*containerState, bool) {
	var cs containerState
	if json.Unmarshal(b, &cs) != nil || cs.Runtime != RuntimeDocker {
		return nil, false
	}
	return &cs, true
}

// probeTimeout bounds the docker checks of one runtime choice.
const probeTimeout = 10 * time.Second

// probeDocker returns why the docker runtime cannot run the task, or nil.
// With cfg nil (the fingerprint) it does not look for the task's
// bootstrap.
func (d *Driver) probeDocker(ctx context.Context, cfg *driver.TaskConfig) error {
	if d.cfg.Docker == nil {
		return errors.New("the docker driver is disabled on this node")
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// A ping, not the driver's whole fingerprint: this runs before every
	// sidecar start.
	if err := d.cfg.Docker.Ping(ctx); err != nil {
		return fmt.Errorf("docker driver unhealthy: %w", err)
	}
	if cfg != nil {
		if cfg.NetNSPath == "" {
			return ErrNoNetworkNamespace
		}
		p := filepath.Join(cfg.TaskDir, "secrets", connect.RuntimeBootstrapFile)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("no container bootstrap %s (the client writes one for each connect_proxy task)", p)
		}
	}
	present, err := d.cfg.Docker.ImagePresent(ctx, d.cfg.EnvoyImage)
	switch {
	case err != nil:
		return err
	case !present && !d.cfg.EnvoyImagePull:
		return fmt.Errorf("image %s is not present locally (envoy_image_pull is off)", d.cfg.EnvoyImage)
	}
	return nil
}

// startContainer runs the sidecar as Nomad's Envoy container through the
// docker driver, which joins it to the allocation's namespace (through
// its pause container) and mounts alloc/, local/ and secrets/ at Nomad's
// paths: the image with Nomad's Envoy arguments for the container
// bootstrap the client wrote, then the task's envoy_args, and ENVOY_UID=0
// unless the task sets it (see connect.EnvoyUIDEnv).
func (d *Driver) startContainer(cfg *driver.TaskConfig, tc *TaskConfig) (*driver.TaskHandle, error) {
	dcfg := *cfg
	dcfg.Config = connect.DockerSidecarConfig(d.cfg.EnvoyImage, connect.RuntimeBootstrapPath, tc.EnvoyArgs)
	dcfg.Env = maps.Clone(cfg.Env)
	if dcfg.Env == nil {
		dcfg.Env = map[string]string{}
	}
	if _, ok := dcfg.Env[connect.EnvoyUIDEnv]; !ok {
		dcfg.Env[connect.EnvoyUIDEnv] = "0"
	}
	h, err := d.cfg.Docker.StartTask(&dcfg)
	if err != nil {
		return nil, err
	}
	st, err := json.Marshal(containerState{Runtime: RuntimeDocker, Version: containerStateVersion, Config: &dcfg,
		HandleVersion: h.Version, State: h.DriverState})
	if err != nil {
		if derr := d.cfg.Docker.DestroyTask(cfg.ID, true); derr != nil {
			d.logger.Warn("failed to remove the sidecar container", "alloc_id", cfg.AllocID, "task", cfg.Name, "error", derr)
		}
		return nil, fmt.Errorf("failed to encode driver state: %w", err)
	}
	d.setContainer(cfg.ID, true)
	return &driver.TaskHandle{Version: h.Version, Config: cfg, State: h.State, DriverState: st}, nil
}

// recoverContainer hands a container sidecar's handle back to the docker
// driver.
func (d *Driver) recoverContainer(h *driver.TaskHandle, cs *containerState) error {
	if d.cfg.Docker == nil {
		return fmt.Errorf("failed to recover task %s: it runs as a docker container and %w", h.Config.ID, errDockerDisabled)
	}
	if cs.Version != containerStateVersion || cs.Config == nil {
		return fmt.Errorf("container sidecar state version %d: %w", cs.Version, driver.ErrHandleVersion)
	}
	err := d.cfg.Docker.RecoverTask(&driver.TaskHandle{Version: cs.HandleVersion, Config: cs.Config, State: h.State, DriverState: cs.State})
	if err != nil {
		return err
	}
	d.setContainer(h.Config.ID, true)
	return nil
}

// errDockerDisabled: a container sidecar outlived the agent's docker driver.
var errDockerDisabled = errors.New("the docker driver is disabled on this node")

// isPullFailure: the docker runtime could not pull the image it was
// allowed to pull, so the next runtime is tried.
func isPullFailure(err error) bool { return errors.Is(err, docker.ErrImagePull) }

// setContainer records whether a task runs as a container.
func (d *Driver) setContainer(taskID string, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if on {
		d.containers[taskID] = true
	} else {
		delete(d.containers, taskID)
	}
}

// target is the driver that runs a task: docker's for a container
// sidecar, the executor's otherwise (also for unknown IDs, which it
// reports as driver.ErrTaskNotFound).
func (d *Driver) target(taskID string) execDriver {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.containers[taskID] {
		return d.cfg.Docker
	}
	return d.Driver
}
