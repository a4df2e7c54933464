package agent

import (
	"bytes"
	"context"
	"sync"
	"time"

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
	out := &cappedBuffer{max: checks.MaxOutput}
	code, err := e.a.client.ExecTask(ctx, e.alloc, task, &driver.ExecOptions{Command: cmd, Stdout: out, Stderr: out})
	return out.Bytes(), code, err
}

// cappedBuffer collects a check's stdout and stderr, written from two
// goroutines, keeping the first max bytes; the rest is read and dropped
// (the command must not block on a full pipe).
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *cappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

type taskRestarter struct {
	a     *Agent
	alloc string
}

func (r taskRestarter) Restart(ctx context.Context, task, reason string) error {
	return r.a.client.RestartTask(ctx, r.alloc, task, reason)
}

func (r taskRestarter) Started(task string) (time.Time, bool) {
	return r.a.client.TaskStarted(r.alloc, task)
}
