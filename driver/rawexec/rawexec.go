// Package rawexec is the raw_exec task driver: it runs a command as a plain
// host process (no isolation beyond an optional network namespace and
// user), under a detached executor so the task survives agent restarts.
// All behaviour lives in driver/internal/proc; this package names it.
//
// Concurrency: a Driver is safe for concurrent use.
package rawexec

import (
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver/internal/proc"
)

// Name is the driver's jobspec name.
const Name = "raw_exec"

// Config configures the driver.
type Config struct {
	// ExecutorCmd runs the executor (driver/executor.Main); default
	// [os.Executable(), "executor"].
	ExecutorCmd []string
	// StateDir keeps per-task executor state; it must survive agent
	// restarts. Default "<os.TempDir()>/meshlet-raw_exec".
	StateDir string
	// Name overrides the driver name (e.g. a plugin serving it as "echo").
	Name string
}

// Driver is the raw_exec driver. It implements driver.Driver and
// driver.StreamingExecer.
type Driver struct {
	*proc.Driver
}

// New returns a raw_exec driver. raw_exec is always healthy; whether it is
// enabled is the agent's decision. It logs with logger as given, so name it
// for the driver (the agent's is agent.driver.raw_exec).
func New(cfg Config, logger hclog.Logger) *Driver {
	name := cfg.Name
	if name == "" {
		name = Name
	}
	return &Driver{proc.New(proc.Options{
		Name:        name,
		ExecutorCmd: cfg.ExecutorCmd,
		StateDir:    cfg.StateDir,
	}, logger)}
}
