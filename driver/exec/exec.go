// Package exec is the exec task driver. Like Nomad's, it isolates each task:
// chrooted (pivot_root) into its task directory, with the client's
// chroot_env (by default the host's /bin, /etc, /lib, /lib32, /lib64, /sbin
// and /usr) bound read-only, a fresh /proc, a minimal /dev and /alloc; in
// new PID, mount, IPC and UTS namespaces (the network namespace is the
// allocation's; pid_mode and ipc_mode "host" share the host's); as nobody
// unless the task sets a user; with no_new_privs and the capabilities
// Nomad's exec driver gives (Config.AllowCaps, the task's cap_add and
// cap_drop). Each task also gets its own cpu and memory cgroups
// ("meshlet/<task-id>") carrying its resource limits. Inside the root,
// NOMAD_TASK_DIR is /local, NOMAD_SECRETS_DIR /secrets and NOMAD_ALLOC_DIR
// /alloc. It needs root; without usable cgroups it reports itself
// unhealthy (saying why) and, if used anyway, runs tasks without limits.
// All behaviour lives in driver/internal/proc and driver/internal/isolate.
//
// Concurrency: a Driver is safe for concurrent use.
package exec

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/proc"
)

// Name is the driver's jobspec name.
const Name = "exec"

// Driver is the exec driver. It implements driver.Driver and
// driver.StreamingExecer.
type Driver struct {
	*proc.Driver
	// cfgErr is why cfg is invalid (Config.Validate): such a driver is
	// unhealthy and starts no task.
	cfgErr error
}

// New returns an exec driver. It logs with logger as given, so name it for
// the driver (the agent's is agent.driver.exec). An invalid cfg (see
// Config.Validate; the agent checks it first) gives a driver that reports
// itself unhealthy with the reason and refuses every task.
func New(cfg Config, logger hclog.Logger) *Driver {
	d := &Driver{cfgErr: cfg.Validate()}
	d.Driver = proc.New(proc.Options{
		Name:           Name,
		ExecutorCmd:    cfg.ExecutorCmd,
		StateDir:       cfg.StateDir,
		Cgroups:        true,
		Isolate:        true,
		CgroupParent:   cfg.CgroupParent,
		ChrootEnv:      cfg.ChrootEnv,
		AllowCaps:      cfg.AllowCaps,
		DefaultPIDMode: cfg.DefaultPIDMode,
		DefaultIPCMode: cfg.DefaultIPCMode,
		Fingerprint:    d.fingerprint,
	}, logger)
	return d
}

// StartTask implements driver.Driver (see proc.Driver.StartTask); a driver
// with an invalid Config refuses it.
func (d *Driver) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	if d.cfgErr != nil {
		return nil, fmt.Errorf("failed to start task: %w", driver.Unrecoverable(d.cfgErr))
	}
	return d.Driver.StartTask(cfg)
}

// fingerprint: healthy only as root with usable cgroups and a valid
// Config; otherwise the description and the driver.exec.warning attribute
// say why.
func (d *Driver) fingerprint(context.Context) (*driver.Fingerprint, error) {
	fp := &driver.Fingerprint{Detected: true, Attributes: map[string]string{}}
	if d.cfgErr != nil {
		fp.HealthDescription = d.cfgErr.Error()
		fp.Attributes["driver.exec.warning"] = fp.HealthDescription
		return fp, nil
	}
	if os.Geteuid() != 0 {
		fp.HealthDescription = "exec driver requires root"
		fp.Attributes["driver.exec.warning"] = fp.HealthDescription
		return fp, nil
	}
	h, err := cgroups.Detect()
	if err != nil {
		fp.HealthDescription = "resource limits cannot be enforced: " + err.Error()
		fp.Attributes["driver.exec.cgroups"] = "unavailable"
		fp.Attributes["driver.exec.warning"] = fp.HealthDescription
		return fp, nil
	}
	fp.Healthy = true
	fp.HealthDescription = "healthy"
	fp.Attributes["driver.exec"] = "1"
	fp.Attributes["driver.exec.cgroups"] = string(h.Mode)
	fp.Attributes["driver.exec.fs_isolation"] = "chroot"
	return fp, nil
}
