// Package proc is the driver core shared by the exec, raw_exec and
// connect_proxy drivers: tasks run under a detached executor process
// (driver/executor), tracked in a small in-memory task store and
// re-attached after an agent restart from a versioned recovery payload. The
// drivers differ in their name, fingerprint, how a task's config becomes a
// command line (Options.Launch), whether tasks get cgroups and whether they
// are isolated (chroot, namespaces, reduced privileges: see isolated.go).
//
// Concurrency: every Driver method is safe for concurrent use. The task
// store is a map behind an RWMutex; each taskHandle guards its mutable
// fields (state, exit) with its own lock, and its exit is announced by
// closing a channel. Locks are taken in public methods, never across a
// blocking wait.
package proc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/isolate"
)

// Options configure a Driver.
type Options struct {
	// Name is the driver name ("exec", "raw_exec").
	Name string
	// ExecutorCmd is the command that runs driver/executor; "-spec <file>
	// -status-fd 3" is appended. Default: [os.Executable(), "executor"].
	ExecutorCmd []string
	// StateDir holds one directory per task (executor log, exit file).
	// It must survive agent restarts for recovery to work. Default:
	// "<os.TempDir()>/meshlet-<Name>".
	StateDir string
	// Cgroups puts each task in its own cgroups ("<CgroupParent>/<task>")
	// with the task's resource limits, when the host supports them.
	Cgroups      bool
	CgroupParent string
	// Isolate runs each task chrooted into its task dir, in new PID, mount,
	// IPC and UTS namespaces, as nobody unless it sets a user, with
	// no_new_privs and a reduced capability set (driver/internal/isolate,
	// isolated.go). The task config may then set cap_add, cap_drop,
	// pid_mode and ipc_mode.
	Isolate bool
	// ChrootEnv maps host paths to paths in an isolated task's root, bound
	// read-only (Nomad's client chroot_env); nil or empty means
	// isolate.DefaultChrootEnv. Paths must be absolute.
	ChrootEnv map[string]string
	// AllowCaps are the capabilities an isolated task may add (Nomad's
	// allow_caps); its default set is isolate.DefaultCaps within them.
	// nil means isolate.DefaultCaps.
	AllowCaps []string
	// DefaultPIDMode and DefaultIPCMode (ModePrivate or ModeHost; ""
	// means private) apply to isolated tasks that set no pid_mode or
	// ipc_mode.
	DefaultPIDMode string
	DefaultIPCMode string
	// Fingerprint reports the driver's health; nil means always healthy.
	Fingerprint func(ctx context.Context) (*driver.Fingerprint, error)
	// Launch, when set, builds what a task runs from its config, for a
	// driver whose config is not a command line (connect_proxy); nil reads
	// config command and args and runs them with the task's env.
	Launch func(cfg *driver.TaskConfig) (*Launch, error)
}

// Launch is what a task runs: its command (a path, or a name looked up in
// the task's PATH), its arguments and its environment.
type Launch struct {
	Command string
	Args    []string
	// Env replaces the task's env when not nil.
	Env map[string]string
}

// Driver implements driver.Driver and driver.StreamingExecer.
type Driver struct {
	opts   Options
	binds  []isolate.Bind // opts.ChrootEnv in bind order
	logger hclog.Logger
	tasks  *taskStore
}

var (
	_ driver.Driver          = (*Driver)(nil)
	_ driver.StreamingExecer = (*Driver)(nil)
)

// New returns a Driver; zero Options fields take their defaults. It logs
// with logger as given: the caller names it (the agent passes
// agent.driver.<name>).
func New(opts Options, logger hclog.Logger) *Driver {
	if len(opts.ExecutorCmd) == 0 {
		self, err := os.Executable()
		if err != nil {
			self = "/proc/self/exe" // resolved by the kernel at exec time
		}
		opts.ExecutorCmd = []string{self, "executor"}
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(os.TempDir(), "meshlet-"+opts.Name)
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = "meshlet"
	}
	if len(opts.ChrootEnv) == 0 {
		opts.ChrootEnv = isolate.DefaultChrootEnv()
	}
	if opts.AllowCaps == nil {
		opts.AllowCaps = isolate.DefaultCaps()
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Driver{opts: opts, binds: isolate.ChrootBinds(opts.ChrootEnv), logger: logger, tasks: newTaskStore()}
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return d.opts.Name }

// Fingerprint implements driver.Driver.
func (d *Driver) Fingerprint(ctx context.Context) (*driver.Fingerprint, error) {
	if d.opts.Fingerprint != nil {
		return d.opts.Fingerprint(ctx)
	}
	return &driver.Fingerprint{
		Detected:          true,
		Healthy:           true,
		HealthDescription: "healthy",
		Attributes:        map[string]string{"driver." + d.opts.Name: "1"},
	}, nil
}

// lookup returns the task or ErrTaskNotFound.
func (d *Driver) lookup(taskID string) (*taskHandle, error) {
	h := d.tasks.get(taskID)
	if h == nil {
		return nil, fmt.Errorf("task %q: %w", taskID, driver.ErrTaskNotFound)
	}
	return h, nil
}
