package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/launch"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// startTimeout is a hang guard on the executor's start report.
const startTimeout = 30 * time.Second

// taskLaunch reads what the task runs: Options.Launch's answer, or config
// command and args (and, isolated, the isolation keys).
func (d *Driver) taskLaunch(cfg *driver.TaskConfig) (*taskConfig, error) {
	if d.opts.Launch == nil {
		tc, err := parseTaskConfig(cfg.Config, d.opts.Isolate)
		return tc, driver.Unrecoverable(err) // a bad config stays bad
	}
	l, err := d.opts.Launch(cfg)
	if err != nil {
		return nil, err
	}
	return &taskConfig{Command: l.Command, Args: l.Args, Env: l.Env}, nil
}

// StartTask implements driver.Driver: it launches an executor for the task
// and returns once the task runs, or with the start error and nothing left
// behind.
func (d *Driver) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	if cfg == nil || cfg.ID == "" || cfg.ID == "." || cfg.ID == ".." {
		return nil, errors.New("failed to start task: a task ID is required")
	}
	tc, iso, command, err := d.prepare(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, err)
	}
	if err := d.tasks.reserve(cfg.ID); err != nil {
		return nil, fmt.Errorf("failed to start task: %w", err)
	}
	// The cleanup stack undoes everything on any failure below.
	var cleanup []func()
	success := false
	defer func() {
		if !success {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	cleanup = append(cleanup, func() { d.tasks.delete(cfg.ID) })

	dir := filepath.Join(d.opts.StateDir, url.PathEscape(cfg.ID))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create task state dir: %w", err)
	}
	cleanup = append(cleanup, func() { _ = os.RemoveAll(dir) })

	spec := d.buildSpec(cfg, tc, command, dir, iso)
	specPath := filepath.Join(dir, "spec.json")
	if err := executor.WriteSpec(specPath, spec); err != nil {
		return nil, err
	}
	cmd, started, err := d.launchExecutor(dir, specPath, iso != nil && !iso.hostPID)
	if err != nil {
		return nil, fmt.Errorf("failed to start task %s: %w", cfg.ID, err)
	}
	execStart, err := procfs.StartTime(cmd.Process.Pid)
	if err != nil {
		d.logger.Warn("failed to read executor start time", "task_id", cfg.ID, "error", err)
	}
	st := &driverState{
		Version:           handleVersion,
		ExecutorPID:       cmd.Process.Pid,
		ExecutorStartTime: execStart,
		TaskPID:           started.PID,
		TaskStartTime:     started.StartTime,
		StartedAt:         time.Now().UTC(),
		StateDir:          dir,
		ExitFile:          spec.ExitFile,
		Command:           command,
		Args:              tc.Args,
		Cgroup:            started.Cgroup,
		Isolated:          spec.Isolation != nil,
	}
	if spec.Isolation != nil {
		st.Caps, st.AddedCaps = spec.Isolation.Caps, spec.Isolation.Added
	}
	h := newHandle(cfg, st)
	go d.monitorChild(h, cmd)
	d.tasks.set(cfg.ID, h)
	d.logger.Info("task started", "task_id", cfg.ID, "alloc_id", cfg.AllocID, "task", cfg.Name, "pid", st.TaskPID)

	// The recovery payload is written last, once the task fully runs.
	payload, err := json.Marshal(st)
	if err != nil { // cannot happen for this struct; keep the task consistent anyway
		_ = h.signalGroup(syscall.SIGKILL)
		return nil, fmt.Errorf("failed to encode driver state: %w", err)
	}
	success = true
	return &driver.TaskHandle{Version: handleVersion, Config: cfg, State: driver.TaskStateRunning, DriverState: payload}, nil
}

// prepare checks what StartTask needs before anything is made: the task
// config, an isolated task's isolation (nil otherwise), the task dir, and
// the command (resolved now unless isolated: the executor resolves an
// isolated task's command in its root).
func (d *Driver) prepare(cfg *driver.TaskConfig) (tc *taskConfig, iso *isolation, command string, err error) {
	if tc, err = d.taskLaunch(cfg); err != nil {
		return nil, nil, "", err
	}
	if d.opts.Isolate {
		if iso, err = d.planIsolation(tc); err != nil {
			return nil, nil, "", err
		}
		d.logger.Debug("task capabilities", "task_id", cfg.ID, "alloc_id", cfg.AllocID, "task", cfg.Name,
			"capabilities", iso.caps.String(), "added", iso.added.String())
	}
	if cfg.TaskDir == "" {
		return nil, nil, "", errors.New("task dir is required")
	}
	command = tc.Command
	env := cfg.Env
	if tc.Env != nil {
		env = tc.Env
	}
	if !d.opts.Isolate {
		if command, err = launch.LookPath(tc.Command, env, cfg.TaskDir); err != nil {
			return nil, nil, "", err
		}
	}
	return tc, iso, command, nil
}

// buildSpec fills the executor spec: log bases, rotation bounds, cgroup.
func (d *Driver) buildSpec(cfg *driver.TaskConfig, tc *taskConfig, command, dir string, iso *isolation) *executor.Spec {
	logDir := cfg.TaskDir
	if cfg.AllocDir != "" {
		logDir = filepath.Join(cfg.AllocDir, "logs")
	}
	spec := &executor.Spec{
		TaskID:         cfg.ID,
		Command:        command,
		Args:           tc.Args,
		Env:            cfg.Env,
		Dir:            cfg.TaskDir,
		User:           cfg.User,
		NetNSPath:      cfg.NetNSPath,
		StdoutPath:     cfg.StdoutPath,
		StderrPath:     cfg.StderrPath,
		LogMaxFiles:    cfg.LogMaxFiles,
		LogMaxFileSize: int64(cfg.LogMaxFileSizeMB) << 20,
		ExitFile:       filepath.Join(dir, "exit.json"),
	}
	if tc.Env != nil {
		spec.Env = tc.Env
	}
	if spec.StdoutPath == "" {
		spec.StdoutPath = filepath.Join(logDir, cfg.Name+".stdout")
	}
	if spec.StderrPath == "" {
		spec.StderrPath = filepath.Join(logDir, cfg.Name+".stderr")
	}
	if spec.LogMaxFiles <= 0 {
		spec.LogMaxFiles = driver.DefaultLogMaxFiles
	}
	if spec.LogMaxFileSize <= 0 {
		spec.LogMaxFileSize = driver.DefaultLogMaxFileSizeMB << 20
	}
	if iso != nil {
		d.isolateSpec(cfg, spec, iso)
	}
	if d.opts.Cgroups {
		if _, err := cgroups.Detect(); err != nil {
			d.logger.Warn("task runs without resource limits", "task_id", cfg.ID, "error", err)
		} else {
			spec.Cgroup = &executor.CgroupSpec{Parent: d.opts.CgroupParent, Name: url.PathEscape(cfg.ID)}
			if r := cfg.Resources; r != nil {
				spec.Cgroup.Limits = cgroups.Limits{CPUShares: r.CPUShares, MemoryMB: r.MemoryMB, MemoryMaxMB: r.MemoryMaxMB}
			}
		}
	}
	return spec
}

// launchExecutor starts the executor in its own session (with newPIDNS,
// as init of a new PID namespace) and waits for its start report. On
// failure the executor is gone when it returns.
func (d *Driver) launchExecutor(dir, specPath string, newPIDNS bool) (*exec.Cmd, *executor.Started, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open executor log: %w", err)
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create status pipe: %w", err)
	}
	defer r.Close()
	args := append(append([]string{}, d.opts.ExecutorCmd[1:]...), "-spec", specPath, "-status-fd", "3")
	cmd := exec.Command(d.opts.ExecutorCmd[0], args...)
	cmd.Dir = "/"
	cmd.Env = executor.LaunchEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if newPIDNS {
		// The executor is init (PID 1) of the task's PID namespace.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to launch executor: %w", err)
	}
	started, err := readStarted(r)
	if err == nil && started.Error != "" {
		err = errors.New(started.Error)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if started == nil {
			err = fmt.Errorf("%w; executor log: %s", err, logTail(logFile.Name()))
		}
		return nil, nil, err
	}
	return cmd, started, nil
}

// logTail returns the end of the executor's log, for start errors.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return strconv.Quote(string(b))
}

// readStarted reads the executor's one status message.
func readStarted(r *os.File) (*executor.Started, error) {
	_ = r.SetReadDeadline(time.Now().Add(startTimeout))
	var s executor.Started
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("executor exited before reporting the task start")
		}
		return nil, fmt.Errorf("failed to read executor start report: %w", err)
	}
	if s.Error == "" && s.PID <= 0 {
		return nil, errors.New("executor reported no task pid")
	}
	return &s, nil
}
