// Package exec is the exec task driver. Like Nomad's, it isolates each task:
// chrooted (pivot_root) into its task directory, with the host's chroot_env
// (/bin, /etc, /lib, /lib32, /lib64, /sbin, /usr) bound read-only, a fresh
// /proc, a minimal /dev and /alloc; in new PID, mount, IPC and UTS
// namespaces (the network namespace is the allocation's); as nobody unless
// the task sets a user; with no_new_privs and a bounding set reduced to
// Nomad's default allow-list. Each task also gets its own cpu and memory
// cgroups ("meshlet/<task-id>") carrying its resource limits. Inside the
// root, NOMAD_TASK_DIR is /local, NOMAD_SECRETS_DIR /secrets and
// NOMAD_ALLOC_DIR /alloc. It needs root; without usable cgroups it reports
// itself unhealthy (saying why) and, if used anyway, runs tasks without
// limits. All behaviour lives in driver/internal/proc and
// driver/internal/isolate.
//
// Concurrency: a Driver is safe for concurrent use.
package exec

import (
	"context"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/proc"
)

// Name is the driver's jobspec name.
const Name = "exec"

// Config configures the driver.
type Config struct {
	// ExecutorCmd runs the executor (driver/executor.Main); default
	// [os.Executable(), "executor"].
	ExecutorCmd []string
	// StateDir keeps per-task executor state; it must survive agent
	// restarts. Default "<os.TempDir()>/meshlet-exec".
	StateDir string
	// CgroupParent is the cgroup under which task groups are made,
	// relative to each hierarchy's root. Default "meshlet".
	CgroupParent string
}

// Driver is the exec driver. It implements driver.Driver and
// driver.StreamingExecer.
type Driver struct {
	*proc.Driver
}

// New returns an exec driver. It logs with logger as given, so name it for
// the driver (the agent's is agent.driver.exec).
func New(cfg Config, logger hclog.Logger) *Driver {
	return &Driver{proc.New(proc.Options{
		Name:         Name,
		ExecutorCmd:  cfg.ExecutorCmd,
		StateDir:     cfg.StateDir,
		Cgroups:      true,
		Isolate:      true,
		CgroupParent: cfg.CgroupParent,
		Fingerprint:  fingerprint,
	}, logger)}
}

// fingerprint: healthy only as root with usable cgroups; otherwise the
// description and the driver.exec.warning attribute say why.
func fingerprint(context.Context) (*driver.Fingerprint, error) {
	fp := &driver.Fingerprint{Detected: true, Attributes: map[string]string{}}
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
