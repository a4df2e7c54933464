package apitest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/meshlet/meshlet/api"
)

// AppendTaskLog appends data to task's stream ("stdout" or "stderr") for
// every allocation, waking followers.
func (b *Backend) AppendTaskLog(task, stream, data string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := task + "/" + stream
	b.logs[key] = append(b.logs[key], data...)
	close(b.changed)
	b.changed = make(chan struct{})
}

// TaskLogs implements api.Backend over the logs set by AppendTaskLog.
func (b *Backend) TaskLogs(ctx context.Context, req api.LogRequest) (io.ReadCloser, error) {
	a, err := b.GetAllocation(ctx, req.AllocID)
	if err != nil {
		return nil, err
	}
	if _, ok := a.TaskStates[req.Task]; !ok {
		return nil, fmt.Errorf("task %q: %w", req.Task, api.ErrNotFound)
	}
	b.mu.Lock()
	size := int64(len(b.logs[req.Task+"/"+req.Type]))
	b.mu.Unlock()
	pos := min(req.Offset, size)
	if req.Origin == "end" {
		pos = size - pos
	}
	ctx, cancel := context.WithCancel(ctx)
	return &logReader{b: b, key: req.Task + "/" + req.Type, pos: pos, follow: req.Follow, ctx: ctx, cancel: cancel}, nil
}

type logReader struct {
	b      *Backend
	key    string
	pos    int64
	follow bool
	ctx    context.Context
	cancel context.CancelFunc
}

func (r *logReader) Read(p []byte) (int, error) {
	for {
		r.b.mu.Lock()
		buf, ch := r.b.logs[r.key], r.b.changed
		r.b.mu.Unlock()
		if r.pos < int64(len(buf)) {
			n := copy(p, buf[r.pos:])
			r.pos += int64(n)
			return n, nil
		}
		if !r.follow {
			return 0, io.EOF
		}
		select {
		case <-ch:
		case <-r.ctx.Done():
			return 0, io.EOF
		}
	}
}

func (r *logReader) Close() error {
	r.cancel()
	return nil
}

// execWaitDelay bounds how long ExecTask waits for stdin copying after the
// process exited (a command that never reads stdin would block Wait).
const execWaitDelay = time.Second

// ExecTask implements api.Backend by running the command as a local
// process (no namespace, no task environment): enough to prove the exec
// protocol end to end.
func (b *Backend) ExecTask(ctx context.Context, req api.ExecRequest) (int, error) {
	if _, err := b.GetAllocation(ctx, req.AllocID); err != nil {
		return 0, err
	}
	if len(req.Cmd) == 0 {
		return 0, fmt.Errorf("%w: empty command", api.ErrInvalid)
	}
	cmd := exec.CommandContext(ctx, req.Cmd[0], req.Cmd[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	cmd.WaitDelay = execWaitDelay
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		return exitErr.ExitCode(), nil
	}
	return 0, fmt.Errorf("failed to run %s: %s", strings.Join(req.Cmd, " "), err.Error())
}
