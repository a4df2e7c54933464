// Package docker is the built-in docker task driver. It talks to a Docker
// daemon (API 1.41, Docker 20.10, or newer; the client negotiates the
// version) over Config.Endpoint and runs each task as one container
// labelled with its allocation and task, so containers are owned by dockerd
// and keep running while the agent is down. The driver copies the
// container's output (docker logs, followed) into the task's rotated log
// files (driver/logging), resuming from the last timestamp it wrote after
// RecoverTask.
//
// Networking: in an allocation with its own network namespace (bridge or
// cni/* mode) a task joins that namespace through the allocation's pause
// container (pause.go), so docker, exec and raw_exec tasks share it;
// network_mode "none" gives a task a namespace of its own instead. In host
// mode a task runs with network_mode "host" (the default) or "none".
//
// Concurrency: a Driver is safe for concurrent use. The task store is a map
// behind a RWMutex; each taskHandle guards its mutable fields with its own
// mutex.
package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
)

// Name is the driver's jobspec name.
const Name = "docker"

// DefaultEndpoint is the daemon's default socket.
const DefaultEndpoint = "unix:///var/run/docker.sock"

// Container labels the driver sets.
const (
	LabelAllocID = "com.meshlet.alloc_id"
	LabelTask    = "com.meshlet.task_name"
	LabelTaskID  = "com.meshlet.task_id"
	LabelJob     = "com.meshlet.job_name"
)

// fingerprintTimeout bounds one daemon probe.
const fingerprintTimeout = 5 * time.Second

// Config configures the driver (the plugin "docker" { config { } } block).
type Config struct {
	// Endpoint is the daemon's address; default DefaultEndpoint.
	Endpoint string
	// StateDir keeps each task's log cursor; it must survive agent
	// restarts. Default "<os.TempDir()>/meshlet-docker".
	StateDir string
	// AllowPrivileged lets tasks set privileged = true.
	AllowPrivileged bool
	// AllowCaps bounds cap_add; nil means DefaultCaps.
	AllowCaps []string
	// VolumesEnabled lets tasks bind host paths (volumes, mount type
	// bind) and use docker volumes; relative volume sources, inside the
	// task directory, are always allowed.
	VolumesEnabled bool
	// AllowRuntimes bounds a task's runtime; nil means Nomad's default,
	// runc and nvidia.
	AllowRuntimes []string
	// AllowedModes are Nomad's allowed_modes: per namespace kind ("ipc",
	// "pid") the ipc_mode / pid_mode values ("*" globs) tasks may set
	// without allow_privileged.
	AllowedModes map[string][]string
	// GCContainer removes a task's container when it is destroyed (Nomad's
	// gc { container = true }, the default; nil means true).
	GCContainer *bool
	// GCImage removes images the driver pulled or imported once no task
	// uses them, after GCImageDelay (Nomad's gc { image, image_delay });
	// nil means true, 0 means 3m.
	GCImage      *bool
	GCImageDelay time.Duration
	// Dangling is gc { dangling_containers }.
	Dangling DanglingConfig
}

func (c *Config) gcContainer() bool { return c.GCContainer == nil || *c.GCContainer }

// Driver is the docker driver. It implements driver.Driver.
type Driver struct {
	cfg    Config
	logger hclog.Logger

	// ownerOnce makes ownerID, the LabelOwner value (dangling.go owner).
	ownerOnce sync.Once
	ownerID   string

	clientOnce sync.Once
	client     *client.Client
	clientErr  error

	// pauseLocks serializes pause container work per allocation.
	pauseLocks allocLocks

	images *imageGC
	// stopReconcile ends the dangling-container sweep; reconcileDone is
	// closed when it has.
	stopReconcile context.CancelFunc
	reconcileDone chan struct{}

	mu    sync.RWMutex
	tasks map[string]*taskHandle
}

var (
	_ driver.Driver  = (*Driver)(nil)
	_ driver.Sweeper = (*Driver)(nil)
)

// New returns a docker driver. It does not contact the daemon until used.
// It logs with logger as given, so name it for the driver (the agent's is
// agent.driver.docker).
func New(cfg Config, logger hclog.Logger) *Driver {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), "meshlet-docker")
	}
	d := &Driver{cfg: cfg, logger: logger, tasks: map[string]*taskHandle{}, reconcileDone: make(chan struct{})}
	d.images = newImageGC(d)
	ctx, cancel := context.WithCancel(context.Background())
	d.stopReconcile = cancel
	if dc := cfg.Dangling; dc.Enabled == nil || *dc.Enabled {
		go d.reconcile(ctx, dc.withDefaults())
	} else {
		close(d.reconcileDone)
	}
	return d
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// docker returns the client, made once.
func (d *Driver) docker() (*client.Client, error) {
	d.clientOnce.Do(func() {
		d.client, d.clientErr = client.NewClientWithOpts(client.WithHost(d.cfg.Endpoint), client.WithAPIVersionNegotiation())
		if d.clientErr != nil {
			d.clientErr = fmt.Errorf("failed to create docker client for %s: %w", d.cfg.Endpoint, d.clientErr)
			return
		}
		// Negotiate now, before concurrent use: the client negotiates on
		// its first request without a lock against readers of its
		// version (ContainerList), a data race when the reconciler's
		// first call overlaps a task's.
		ctx, cancel := context.WithTimeout(context.Background(), fingerprintTimeout)
		defer cancel()
		d.client.NegotiateAPIVersion(ctx)
	})
	return d.client, d.clientErr
}

// Close stops following the tasks, as an agent that shuts down does:
// their containers keep running and a later driver's RecoverTask resumes
// their logs where this one stopped. It then releases the client.
func (d *Driver) Close() error {
	d.stopReconcile()
	<-d.reconcileDone
	d.images.stop()
	d.mu.Lock()
	hs := make([]*taskHandle, 0, len(d.tasks))
	for id, h := range d.tasks {
		if h != nil {
			hs = append(hs, h)
			delete(d.tasks, id)
		}
	}
	d.mu.Unlock()
	for _, h := range hs {
		h.cancel()
		<-h.logsDone
	}
	if c, err := d.docker(); err == nil {
		return c.Close()
	}
	return nil
}

// Ping returns nil when the daemon answers: the cheap check of a caller
// about to use the driver (Fingerprint also asks the daemon for its
// version and Info, which takes tens of ms).
func (d *Driver) Ping(ctx context.Context) error {
	c, err := d.docker()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		return fmt.Errorf("failed to connect to docker daemon: %w", err)
	}
	return nil
}

// Fingerprint implements driver.Driver as Nomad's docker driver reports:
// undetected (and unhealthy) when the daemon does not answer at the
// endpoint, healthy with driver.docker.* attributes when it does
// (driver.docker.runtimes lists the daemon's runtimes, for runtime).
func (d *Driver) Fingerprint(ctx context.Context) (*driver.Fingerprint, error) {
	fp := &driver.Fingerprint{Attributes: map[string]string{}}
	c, err := d.docker()
	if err != nil {
		fp.HealthDescription = err.Error()
		return fp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	v, err := c.ServerVersion(ctx)
	if err != nil {
		fp.HealthDescription = fmt.Sprintf("Failed to connect to docker daemon: %v", err)
		return fp, nil
	}
	fp.Detected, fp.Healthy, fp.HealthDescription = true, true, "Healthy"
	fp.Attributes["driver.docker"] = "1"
	fp.Attributes["driver.docker.version"] = v.Version
	fp.Attributes["driver.docker.api_version"] = c.ClientVersion()
	fp.Attributes["driver.docker.os_type"] = v.Os
	if info, err := c.Info(ctx); err == nil && len(info.Runtimes) > 0 {
		fp.Attributes["driver.docker.runtimes"] = strings.Join(slices.Sorted(maps.Keys(info.Runtimes)), ",")
	}
	if d.cfg.AllowPrivileged {
		fp.Attributes["driver.docker.privileged.enabled"] = "true"
	}
	if d.cfg.VolumesEnabled {
		fp.Attributes["driver.docker.volumes.enabled"] = "true"
	}
	return fp, nil
}

// lookup returns a known task or driver.ErrTaskNotFound.
func (d *Driver) lookup(taskID string) (*taskHandle, error) {
	d.mu.RLock()
	h := d.tasks[taskID]
	d.mu.RUnlock()
	if h == nil {
		return nil, fmt.Errorf("%s: %w", taskID, driver.ErrTaskNotFound)
	}
	return h, nil
}

// reserve claims taskID for a starting task.
func (d *Driver) reserve(taskID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.tasks[taskID]; ok {
		return fmt.Errorf("%s: %w", taskID, driver.ErrTaskExists)
	}
	d.tasks[taskID] = nil
	return nil
}

func (d *Driver) set(taskID string, h *taskHandle) {
	d.mu.Lock()
	d.tasks[taskID] = h
	d.mu.Unlock()
}

func (d *Driver) forget(taskID string) {
	d.mu.Lock()
	delete(d.tasks, taskID)
	d.mu.Unlock()
}

// ErrNetNSUnsupported is returned for a task whose allocation has its own
// network namespace (bridge or cni/* mode) on a host where the driver
// cannot make the pause container that joins it.
var ErrNetNSUnsupported = errors.New("docker tasks cannot join an allocation's network namespace here")
