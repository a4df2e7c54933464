package agent

import (
	"bytes"
	"context"

	"github.com/meshlet/meshlet/client/checks"
	"github.com/meshlet/meshlet/driver"
)

// checkExec runs an allocation's script checks in its tasks (as `alloc
// exec` does: the task's namespace, environment and directory).
func (a *Agent) checkExec(allocID string) checks.Execer { return taskExecer{a: a, alloc: allocID} }

// checkRestart restarts an allocation's tasks for check_restart.
func (a *Agent) checkRestart(allocID string) checks.Restarter {
	return taskRestarter{a: a, alloc: allocID}
}

type taskExecer struct {
	a     *Agent
	alloc string
}

func (e taskExecer) Exec(ctx context.Context, task string, cmd []string) ([]byte, int, error) {
	var out bytes.Buffer
	code, err := e.a.client.ExecTask(ctx, e.alloc, task, &driver.ExecOptions{Command: cmd, Stdout: &out, Stderr: &out})
	return out.Bytes(), code, err
}

type taskRestarter struct {
	a     *Agent
	alloc string
}

func (r taskRestarter) Restart(ctx context.Context, task, reason string) error {
	return r.a.client.RestartTask(ctx, r.alloc, task, reason)
}
