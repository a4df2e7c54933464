package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/launch"
)

// cloexecOnce keeps descriptors the agent inherited out of exec sessions.
var cloexecOnce sync.Once

// execDrain bounds how long output is copied after an exec'd command exits
// (a background child may keep the pipes open).
const execDrain = 2 * time.Second

// ExecTask implements driver.Driver. A timeout <= 0 means none; on timeout
// the command's process group is killed and the error wraps
// context.DeadlineExceeded (the output so far is still returned).
func (d *Driver) ExecTask(taskID string, cmd []string, timeout time.Duration) (*driver.ExecResult, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	code, started, err := d.execStreaming(ctx, taskID, &driver.ExecOptions{Command: cmd, Stdout: &stdout, Stderr: &stderr})
	if !started {
		return nil, err
	}
	return &driver.ExecResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, err
}

// ExecTaskStreaming implements driver.StreamingExecer: the command runs in
// the task's network namespace and cgroup, with the task's env, user and
// working directory; for an isolated task also in its PID, IPC and UTS
// namespaces, chrooted into its root, with its privileges. What it leaves
// running is killed when the task ends. Stdout and Stderr are written from
// separate goroutines. A caller-supplied Stdin that never returns from Read
// keeps one goroutine alive until it does. With TTY the command gets a
// pseudo-terminal as its stdio and controlling terminal, sized from
// opts.Resize; its output (stdout and stderr) all goes to Stdout.
func (d *Driver) ExecTaskStreaming(ctx context.Context, taskID string, opts *driver.ExecOptions) (int, error) {
	code, _, err := d.execStreaming(ctx, taskID, opts)
	return code, err
}

// execStreaming runs the session; started tells whether the command ran.
func (d *Driver) execStreaming(ctx context.Context, taskID string, opts *driver.ExecOptions) (code int, started bool, err error) {
	h, err := d.lookup(taskID)
	if err != nil {
		return -1, false, err
	}
	if opts == nil || len(opts.Command) == 0 {
		return -1, false, fmt.Errorf("failed to exec in task %s: no command given", taskID)
	}
	if !h.running() {
		return -1, false, fmt.Errorf("failed to exec in task %s: task is not running", taskID)
	}
	cloexecOnce.Do(launch.CloexecInherited)
	var cmd *exec.Cmd
	if h.st.Isolated {
		cmd, err = isolatedExecCommand(h, opts.Command)
	} else {
		cmd, err = execCommand(h.cfg, opts.Command)
	}
	if err != nil {
		return -1, false, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	newS := newSession
	if opts.TTY {
		newS = newTTYSession
	}
	s, err := newS(cmd, opts)
	if err != nil {
		return -1, false, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	if err := d.startExec(h, cmd); err != nil {
		s.closeAll()
		return -1, false, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	// A task with a cgroup kills what its sessions leave with the rest of
	// its cgroup; one without tracks them.
	track := h.st.Cgroup == nil
	if track {
		h.execs.add(cmd.Process.Pid, opts.TTY)
	}
	s.started()
	code, err = s.wait(ctx, taskID)
	if track {
		h.execs.done(cmd.Process.Pid)
	}
	return code, true, err
}

// execCommand builds the command in the task's context.
func execCommand(cfg *driver.TaskConfig, argv []string) (*exec.Cmd, error) {
	path, err := launch.LookPath(argv[0], cfg.Env, cfg.TaskDir)
	if err != nil {
		return nil, err
	}
	cred, err := launch.Credential(cfg.User)
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{
		Path:        path,
		Args:        append([]string{argv[0]}, argv[1:]...),
		Env:         launch.EnvList(cfg.Env),
		Dir:         cfg.TaskDir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}, nil
}

// session wires an exec'd command's stdio through os pipes (or a pty), so
// that cmd.Start (inside the namespace) starts no goroutine.
type session struct {
	cmd    *exec.Cmd
	opts   *driver.ExecOptions
	child  []*os.File // the command's ends, closed once it started
	stdinW *os.File
	outR   []*os.File
	tty    *os.File // the pty's master (also in outR) when opts.TTY
	copies sync.WaitGroup
	ended  chan struct{} // closed once the command exited
}

func newSession(cmd *exec.Cmd, opts *driver.ExecOptions) (*session, error) {
	s := &session{cmd: cmd, opts: opts, ended: make(chan struct{})}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			s.closeAll()
			return nil, nil, fmt.Errorf("failed to create pipe: %w", err)
		}
		return r, w, nil
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	s.outR, s.child = append(s.outR, outR), append(s.child, outW)
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	s.outR, s.child = append(s.outR, errR), append(s.child, errW)
	cmd.Stdout, cmd.Stderr = outW, errW
	if opts.Stdin != nil {
		inR, inW, err := pipe()
		if err != nil {
			return nil, err
		}
		s.child, s.stdinW = append(s.child, inR), inW
		cmd.Stdin = inR
	}
	return s, nil
}

// started closes the child's ends and starts copying.
func (s *session) started() {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
	dsts := []io.Writer{s.opts.Stdout, s.opts.Stderr}
	for i, r := range s.outR {
		dst := dsts[i]
		if dst == nil {
			dst = io.Discard
		}
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			_, _ = io.Copy(dst, r)
		}()
	}
	if s.tty != nil {
		s.relayTTY(s.ended)
	}
	if s.stdinW != nil {
		go func() {
			_, _ = io.Copy(s.stdinW, s.opts.Stdin)
			s.stdinW.Close()
		}()
	}
}

// wait waits for the command (killing its process group if ctx ends), then
// for its output, and returns its exit code.
func (s *session) wait(ctx context.Context, taskID string) (int, error) {
	waited := make(chan error, 1)
	go func() { waited <- s.cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		waitErr = <-waited
	}
	close(s.ended)
	drained := make(chan struct{})
	go func() { s.copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execDrain):
	}
	s.closeAll()
	<-drained
	code := exitCode(s.cmd.ProcessState)
	if err := ctx.Err(); err != nil {
		return code, fmt.Errorf("failed to exec in task %s: %w", taskID, err)
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return code, fmt.Errorf("failed to exec in task %s: %w", taskID, waitErr)
	}
	return code, nil
}

func (s *session) closeAll() {
	for _, f := range append(append([]*os.File{}, s.child...), s.outR...) {
		f.Close()
	}
	if s.stdinW != nil {
		s.stdinW.Close()
	}
}

// exitCode is the shell convention: the exit status, or 128+signal.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
