package exec

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/driver/internal/isolate"
	"github.com/meshlet/meshlet/driver/internal/proc"
)

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
	// AllowCaps are the capabilities a task may add with cap_add (Nomad's
	// plugin option allow_caps); a task that adds none gets DefaultCaps
	// within them. nil means DefaultCaps; names as CheckCaps takes them.
	AllowCaps []string
	// ChrootEnv maps host paths (directories or files) to paths in each
	// task's root, bound read-only (Nomad's client chroot_env); empty
	// means DefaultChrootEnv. A missing host path is skipped, as in Nomad.
	ChrootEnv map[string]string
	// DefaultPIDMode and DefaultIPCMode are "private" (the default, also
	// for "") or "host": the namespaces of tasks that set no pid_mode or
	// ipc_mode (Nomad's default_pid_mode and default_ipc_mode).
	DefaultPIDMode string
	DefaultIPCMode string
}

// DefaultCaps is Nomad's default allow_caps: AUDIT_WRITE, CHOWN,
// DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP,
// SETGID, SETPCAP, SETUID and SYS_CHROOT (lower case, without "cap_").
func DefaultCaps() []string { return isolate.DefaultCaps() }

// DefaultChrootEnv is the chroot_env used when none is configured: /bin,
// /etc, /lib, /lib32, /lib64, /sbin and /usr, each at its own path.
func DefaultChrootEnv() map[string]string { return isolate.DefaultChrootEnv() }

// Validate checks the options an operator sets: AllowCaps (CheckCaps),
// ChrootEnv (CheckChrootEnv) and the default modes (CheckMode).
func (c *Config) Validate() error {
	var errs []error
	if err := CheckCaps(c.AllowCaps); err != nil {
		errs = append(errs, fmt.Errorf("allow_caps configured with %w", err))
	}
	if err := CheckChrootEnv(c.ChrootEnv); err != nil {
		errs = append(errs, err)
	}
	for key, mode := range map[string]string{"default_pid_mode": c.DefaultPIDMode, "default_ipc_mode": c.DefaultIPCMode} {
		if err := CheckMode(mode); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", key, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid exec driver configuration: %w", err)
	}
	return nil
}

// CheckCaps accepts capability names as Nomad does: case-insensitive,
// with or without the "CAP_" prefix, "all" for every one; every name must
// be a capability this kernel supports. The error (wrapping
// ErrUnknownCap) lists the others.
func CheckCaps(names []string) error {
	_, err := isolate.ParseCaps(names)
	return err
}

// ErrUnknownCap is wrapped by CheckCaps's errors.
var ErrUnknownCap = isolate.ErrUnknownCap

// ErrBadChrootEnv is wrapped by CheckChrootEnv's errors.
var ErrBadChrootEnv = errors.New("invalid chroot_env")

// reservedDests are the paths the driver itself mounts in a task's root;
// chroot_env may not bind anything at or under them.
var reservedDests = []string{"/alloc", "/local", "/secrets", "/proc", "/dev"}

// CheckChrootEnv checks one chroot_env entry per host path: both paths
// absolute; the source not "/" and the destination neither "/" nor at or
// under the paths the driver mounts (/alloc, /local, /secrets, /proc,
// /dev).
func CheckChrootEnv(env map[string]string) error {
	for _, src := range slices.Sorted(maps.Keys(env)) {
		dst := env[src]
		switch {
		case !filepath.IsAbs(src) || !filepath.IsAbs(dst):
			return fmt.Errorf("%w: %q = %q: both paths must be absolute", ErrBadChrootEnv, src, dst)
		case filepath.Clean(src) == "/":
			return fmt.Errorf("%w: %q: the host's root cannot be bound into tasks", ErrBadChrootEnv, src)
		case filepath.Clean(dst) == "/":
			return fmt.Errorf("%w: %q = %q: a task's root is its task directory", ErrBadChrootEnv, src, dst)
		}
		for _, r := range reservedDests {
			if d := filepath.Clean(dst); d == r || strings.HasPrefix(d, r+"/") {
				return fmt.Errorf("%w: %q = %q: the driver mounts %s itself", ErrBadChrootEnv, src, dst, r)
			}
		}
	}
	return nil
}

// CheckMode accepts a pid or IPC mode: "", "private" or "host".
func CheckMode(mode string) error { return proc.CheckMode(mode) }
