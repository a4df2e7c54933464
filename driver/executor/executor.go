// Package executor is the per-task supervisor process, like Nomad's
// executor. The driver launches it in its own session (`meshlet executor
// -spec <file>`); it starts the task (in the task's network namespace and
// cgroups when asked), copies the task's stdout/stderr into rotating log
// files, forwards the signals it receives to the task, records the task's
// exit in an exit file atomically, and exits. Because it is detached from
// the agent, a task and its logging outlive an agent restart; the restarted
// agent re-attaches through the PIDs and the exit file.
//
// An isolated task (Spec.Isolation, the exec driver) is started through
// driver/internal/isolate's stage; its executor is then PID 1 of the task's
// PID namespace (the driver clones it so), or with pid_mode "host" the
// task's subreaper in the host's: it reaps orphans, reports the task's host
// PID, and kills what the task left behind once it exited.
//
// Protocol with the driver: the spec file path comes in -spec; the executor
// writes exactly one JSON Started message to the status pipe (-status-fd,
// default 3) and closes it; its own stdout/stderr are its log.
//
// Concurrency: one executor per task, single-threaded apart from the two
// log-copying goroutines and the waiter.
package executor

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/isolate"
	"github.com/meshlet/meshlet/driver/internal/launch"
	"github.com/meshlet/meshlet/driver/internal/procfs"
	"github.com/meshlet/meshlet/driver/logging"
)

// drainTimeout bounds how long the executor keeps copying output after the
// task exited (a daemonised grandchild may hold the pipes open forever).
const drainTimeout = 2 * time.Second

// forwarded are the signals the executor relays to the task.
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT,
}

// Main runs the executor with the arguments that follow the "executor"
// subcommand and returns the process exit code: 0 once the task's exit is
// recorded, 1 when the task could not be started, 2 on bad usage.
func Main(args []string) int {
	restoreGC()
	if len(args) == 1 && args[0] == isolate.StageArg {
		return isolate.StageMain()
	}
	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	specPath := fs.String("spec", "", "path of the JSON task spec (deleted once read)")
	statusFD := fs.Int("status-fd", 3, "file descriptor to report the start on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "executor", Output: os.Stderr, Level: hclog.Info})
	if *specPath == "" {
		logger.Error("missing -spec")
		return 2
	}
	status := os.NewFile(uintptr(*statusFD), "status")
	if status == nil {
		logger.Error("invalid status fd", "fd", *statusFD)
		return 2
	}
	// The status fd (and anything else the executor inherited) must not
	// reach the task.
	launch.CloexecInherited()
	spec, err := readSpec(*specPath)
	if err != nil {
		report(logger, status, &Started{Error: err.Error()})
		return 1
	}
	logger = logger.With("task_id", spec.TaskID)
	return (&executor{spec: spec, logger: logger}).run(status)
}

// report writes the one status message and closes the pipe.
func report(logger hclog.Logger, status *os.File, msg *Started) {
	if msg.Error != "" {
		logger.Error("task not started", "error", msg.Error)
	}
	if err := json.NewEncoder(status).Encode(msg); err != nil {
		logger.Error("failed to report start", "error", err)
	}
	status.Close()
}

type executor struct {
	spec   *Spec
	logger hclog.Logger
	group  *cgroups.Group
}

func (e *executor) run(status *os.File) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	signal.Ignore(syscall.SIGPIPE)

	cmd, hostPID, copiers, err := e.start()
	if err != nil {
		report(e.logger, status, &Started{Error: err.Error()})
		return 1
	}
	// The task is our unreaped child: its stat exists until we reap it.
	startTime, err := procfs.StartTime(hostPID)
	if err != nil {
		e.logger.Warn("failed to read task start time", "error", err)
	}
	report(e.logger, status, &Started{PID: hostPID, StartTime: startTime, Cgroup: e.group})
	e.logger.Info("task started", "pid", hostPID)
	// The executor now only waits. What the binary's package
	// initialisation left behind is garbage the runtime would keep mapped
	// for good (the heap is too small for the background scavenger):
	// ~0.8 of ~8.3 MB private memory per task.
	debug.FreeOSMemory()

	waited := make(chan waitResult, 1)
	go func() { waited <- e.wait(cmd) }()
	var res waitResult
	for done := false; !done; {
		select {
		case sig := <-sigs:
			e.logger.Info("forwarding signal", "signal", sig.String(), "pid", hostPID)
			_ = cmd.Process.Signal(sig)
		case res = <-waited:
			done = true
		}
	}
	signal.Stop(sigs)
	if iso := e.spec.Isolation; iso != nil {
		// As PID 1 of the task's namespace, or its subreaper in the host's:
		// end what the task left behind.
		if iso.HostPID {
			isolate.KillDescendants()
		} else {
			isolate.ReapAll()
		}
		_ = cmd.Process.Release()
	}
	copiers.wait(drainTimeout)
	return e.finish(res)
}

// waitResult is how the task ended: its wait status, or why it is unknown.
type waitResult struct {
	ws  syscall.WaitStatus
	err error
}

// wait waits for the task. An isolated task's executor is PID 1 of the
// task's namespace and reaps every orphan on the way.
func (e *executor) wait(cmd *exec.Cmd) waitResult {
	if e.spec.Isolation != nil {
		ws, err := isolate.WaitTask(cmd.Process.Pid)
		return waitResult{ws: syscall.WaitStatus(ws), err: err}
	}
	e.endGroup(cmd.Process.Pid)
	err := cmd.Wait()
	if cmd.ProcessState != nil {
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		return waitResult{ws: ws}
	}
	return waitResult{err: err}
}

// endGroup waits for the task to exit without reaping it, then kills what
// is left of its process group: the children it started in the
// background, which Nomad's executor kills with the task too. The
// unreaped task keeps its PID, so the group's ID cannot have been reused.
func (e *executor) endGroup(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			e.logger.Warn("failed to wait for the task", "error", err)
			return
		}
	}
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		e.logger.Warn("failed to kill the task's process group", "error", err)
	}
}

// finish records the exit, releases the cgroup, and returns the executor's
// exit code.
func (e *executor) finish(res waitResult) int {
	st := &ExitStatus{ExitedAt: time.Now().UTC()}
	switch {
	case res.err != nil:
		st.ExitCode, st.Error = -1, res.err.Error()
	case res.ws.Signaled():
		st.Signal = int(res.ws.Signal())
		st.ExitCode = 128 + st.Signal
	default:
		st.ExitCode = res.ws.ExitStatus()
	}
	if e.group != nil {
		st.OOMKilled = e.group.OOMKilled()
		if err := e.group.Destroy(); err != nil {
			e.logger.Warn("failed to remove task cgroup", "error", err)
		}
	}
	e.logger.Info("task exited", "exit_code", st.ExitCode, "signal", st.Signal, "oom_killed", st.OOMKilled)
	if err := writeExitStatus(e.spec.ExitFile, st); err != nil {
		e.logger.Error("failed to record task exit", "error", err)
		return 1
	}
	return 0
}

// start opens the logs, creates the cgroup and starts the task; hostPID is
// the task's PID as the host (and the driver) sees it. On error everything
// it made is undone.
func (e *executor) start() (cmd *exec.Cmd, hostPID int, c *copiers, err error) {
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	c = &copiers{logger: e.logger}
	stdout, err := c.add(e.spec.StdoutPath, e.spec.LogMaxFiles, e.spec.LogMaxFileSize)
	if err != nil {
		return nil, 0, nil, err
	}
	cleanup = append(cleanup, c.abort)
	stderr, err := c.add(e.spec.StderrPath, e.spec.LogMaxFiles, e.spec.LogMaxFileSize)
	if err != nil {
		return nil, 0, nil, err
	}
	if e.spec.Cgroup != nil {
		h, err := cgroups.Detect()
		if err != nil {
			return nil, 0, nil, fmt.Errorf("failed to set up task cgroup: %w", err)
		}
		g, err := h.Create(e.spec.Cgroup.Parent, e.spec.Cgroup.Name, e.spec.Cgroup.Limits)
		if err != nil {
			return nil, 0, nil, err
		}
		e.group = g
		cleanup = append(cleanup, func() { _ = g.Destroy(); e.group = nil })
	}
	if e.spec.Isolation != nil {
		cmd, hostPID, err = e.startIsolated(stdout, stderr)
	} else {
		cmd, err = e.startPlain(stdout, stderr)
		if err == nil {
			hostPID = cmd.Process.Pid
		}
	}
	if err != nil {
		return nil, 0, nil, err
	}
	c.started()
	return cmd, hostPID, c, nil
}

// startPlain starts the task as the spec's user, in its own process group.
func (e *executor) startPlain(stdout, stderr *os.File) (*exec.Cmd, error) {
	cred, err := launch.Credential(e.spec.User)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        e.spec.Command,
		Args:        append([]string{e.spec.Command}, e.spec.Args...),
		Env:         launch.EnvList(e.spec.Env),
		Dir:         e.spec.Dir,
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}
	if err := e.startInGroup(cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

// startInGroup forks the task from inside its cgroup (so it never runs
// outside it) and its network namespace.
func (e *executor) startInGroup(cmd *exec.Cmd) error {
	start := launch.StartInNetNS
	if e.spec.Isolation != nil {
		start = isolate.StartInNetNS
	}
	if e.group == nil {
		return start(cmd, e.spec.NetNSPath)
	}
	restore, err := e.group.Enter()
	if err != nil {
		return err
	}
	startErr := start(cmd, e.spec.NetNSPath)
	if err := restore(); err != nil {
		e.logger.Warn("failed to leave the task cgroup", "error", err)
	}
	return startErr
}

// copiers pumps the task's output pipes into rotating files.
type copiers struct {
	logger  hclog.Logger
	readers []*os.File
	writers []*os.File // the task's ends, closed once it started
	logs    []*logging.Rotator
	done    chan struct{}
}

// add opens a rotating log and a pipe whose write end the task gets.
func (c *copiers) add(base string, maxFiles int, maxSize int64) (*os.File, error) {
	rot, err := logging.NewRotator(base, maxFiles, maxSize, logging.WithLogger(c.logger))
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		rot.Close()
		return nil, fmt.Errorf("failed to create output pipe: %w", err)
	}
	c.logs = append(c.logs, rot)
	c.readers = append(c.readers, r)
	c.writers = append(c.writers, w)
	return w, nil
}

// started closes our copies of the task's pipe ends and starts copying.
func (c *copiers) started() {
	c.done = make(chan struct{}, len(c.readers))
	for i := range c.readers {
		c.writers[i].Close()
		go c.copy(c.readers[i], c.logs[i])
	}
}

// copy drains r into w. Write errors are logged once and the pipe kept
// drained, so a full disk never blocks the task.
func (c *copiers) copy(r io.Reader, w io.Writer) {
	defer func() { c.done <- struct{}{} }()
	buf := make([]byte, 32*1024)
	failed := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil && !failed {
				failed = true
				c.logger.Error("failed to write task output", "error", werr)
			}
		}
		if err != nil {
			return
		}
	}
}

// wait waits for the copiers to reach EOF, at most timeout, then closes
// everything.
func (c *copiers) wait(timeout time.Duration) {
	deadline := time.After(timeout)
	for i := 0; i < len(c.readers); i++ {
		select {
		case <-c.done:
		case <-deadline:
			c.logger.Warn("task output still open after exit; closing it")
			i = len(c.readers)
		}
	}
	c.abort()
}

// abort closes every pipe and log.
func (c *copiers) abort() {
	for _, f := range append(c.readers, c.writers...) {
		f.Close()
	}
	for _, l := range c.logs {
		l.Close()
	}
}
