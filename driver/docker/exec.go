package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/meshlet/meshlet/driver"
)

var _ driver.StreamingExecer = (*Driver)(nil)

// ExecTask implements driver.Driver with docker exec, as the task's user
// with its environment, capturing the output.
func (d *Driver) ExecTask(taskID string, cmd []string, timeout time.Duration) (*driver.ExecResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := d.ExecTaskStreaming(ctx, taskID, &driver.ExecOptions{Command: cmd, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return nil, err
	}
	return &driver.ExecResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// ExecTaskStreaming implements driver.StreamingExecer with docker exec:
// stdin is forwarded (and closed at its end), output streamed, a TTY
// allocated when asked. Cancelling ctx ends the session and, with a local
// daemon, kills the command.
func (d *Driver) ExecTaskStreaming(ctx context.Context, taskID string, opts *driver.ExecOptions) (int, error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return 0, err
	}
	if len(opts.Command) == 0 {
		return 0, fmt.Errorf("failed to exec in task %s: empty command", taskID)
	}
	c, err := d.docker()
	if err != nil {
		return 0, err
	}
	created, err := c.ContainerExecCreate(ctx, h.st.ContainerID, container.ExecOptions{
		Cmd: opts.Command, User: h.cfg.User, Env: containerEnv(h.cfg), Tty: opts.TTY,
		AttachStdin: opts.Stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return 0, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	att, err := c.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: opts.TTY})
	if err != nil {
		return 0, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	defer att.Close()
	if opts.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, opts.Stdin)
			_ = att.CloseWrite()
		}()
	}
	stdout, stderr := orDiscard(opts.Stdout), orDiscard(opts.Stderr)
	copied := make(chan error, 1)
	go func() {
		var err error
		if opts.TTY {
			_, err = io.Copy(stdout, att.Reader)
		} else {
			_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
		}
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		d.killExec(created.ID)
		att.Close()
		<-copied
		return -1, fmt.Errorf("failed to exec in task %s: %w", taskID, ctx.Err())
	}
	if err != nil {
		return -1, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	ins, err := c.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return -1, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	return ins.ExitCode, nil
}

// killExec kills a running exec's process. Docker has no call for it; with
// a daemon on this host (a unix socket) its PID is ours to signal.
func (d *Driver) killExec(execID string) {
	if !strings.HasPrefix(d.cfg.Endpoint, "unix://") {
		return
	}
	c, err := d.docker()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if ins, err := c.ContainerExecInspect(ctx, execID); err == nil && ins.Running && ins.Pid > 0 {
		_ = syscall.Kill(ins.Pid, syscall.SIGKILL)
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
