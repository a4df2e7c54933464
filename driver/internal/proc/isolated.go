package proc

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/internal/isolate"
	"github.com/meshlet/meshlet/driver/internal/launch"
)

// Paths of the task's directories inside an isolated task's root (Nomad's).
const (
	isoAllocDir   = "/alloc"
	isoLocalDir   = "/local"
	isoSecretsDir = "/secrets"
)

// isolation is how one isolated task is jailed: its capabilities and
// which namespaces it shares with the host.
type isolation struct {
	caps, added      isolate.CapSet
	hostPID, hostIPC bool
}

// planIsolation computes a task's isolation from its config and the
// driver's options, as Nomad's exec driver does: the capability set from
// allow_caps, cap_add and cap_drop (a cap_add outside allow_caps is an
// error naming it), the modes from pid_mode and ipc_mode or the driver's
// defaults.
func (d *Driver) planIsolation(tc *taskConfig) (*isolation, error) {
	caps, added, err := isolate.TaskCaps(d.opts.AllowCaps, tc.CapAdd, tc.CapDrop)
	if err != nil {
		return nil, driver.Unrecoverable(fmt.Errorf("config: %w", err))
	}
	return &isolation{
		caps:    caps,
		added:   added,
		hostPID: pickMode(tc.PIDMode, d.opts.DefaultPIDMode) == ModeHost,
		hostIPC: pickMode(tc.IPCMode, d.opts.DefaultIPCMode) == ModeHost,
	}, nil
}

// pickMode is the task's mode, else the driver's default, else private.
func pickMode(task, def string) string {
	switch {
	case task != "":
		return task
	case def != "":
		return def
	}
	return ModePrivate
}

// isolateSpec makes spec run isolated: the default user, the stage command,
// chroot_env, caps, namespaces, and the env's directory variables as the
// task sees them.
func (d *Driver) isolateSpec(cfg *driver.TaskConfig, spec *executor.Spec, iso *isolation) {
	spec.User = isolatedUser(cfg)
	spec.Env = isolatedEnv(cfg)
	spec.Isolation = &executor.IsolationSpec{
		StageCmd: d.opts.ExecutorCmd,
		AllocDir: cfg.AllocDir,
		ReadOnly: d.binds,
		Caps:     iso.caps.Names(),
		Added:    iso.added.Names(),
		HostPID:  iso.hostPID,
		HostIPC:  iso.hostIPC,
	}
}

// isolatedUser is the user an isolated task runs as.
func isolatedUser(cfg *driver.TaskConfig) string {
	if cfg.User != "" {
		return cfg.User
	}
	return isolate.DefaultUser
}

// isolatedEnv is the task's env with NOMAD_ALLOC_DIR, NOMAD_TASK_DIR and
// NOMAD_SECRETS_DIR moved from the host paths the client set to the paths
// inside the task's root. Other values are left as they are.
func isolatedEnv(cfg *driver.TaskConfig) map[string]string {
	moved := map[string][2]string{
		"NOMAD_TASK_DIR":    {filepath.Join(cfg.TaskDir, "local"), isoLocalDir},
		"NOMAD_SECRETS_DIR": {filepath.Join(cfg.TaskDir, "secrets"), isoSecretsDir},
	}
	if cfg.AllocDir != "" {
		moved["NOMAD_ALLOC_DIR"] = [2]string{cfg.AllocDir, isoAllocDir}
	}
	env := make(map[string]string, len(cfg.Env))
	for k, v := range cfg.Env {
		if m, ok := moved[k]; ok && filepath.Clean(v) == m[0] {
			v = m[1]
		}
		env[k] = v
	}
	return env
}

// isolatedExecCommand builds an exec session's command for an isolated
// task: resolved in the task's root, run from its "/" as the task's user.
func isolatedExecCommand(h *taskHandle, argv []string) (*exec.Cmd, error) {
	env := isolatedEnv(h.cfg)
	path, err := isolate.LookPathIn(h.st.TaskPID, argv[0], env, "/")
	if err != nil {
		return nil, err
	}
	cred, err := launch.Credential(isolatedUser(h.cfg))
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{
		Path:        path,
		Args:        append([]string{argv[0]}, argv[1:]...),
		Env:         launch.EnvList(env),
		Dir:         "/",
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}, nil
}

// startExec starts an exec session's command in the task's context and
// cgroup (if it has one), whose processes the executor kills when the task
// ends.
func (d *Driver) startExec(h *taskHandle, cmd *exec.Cmd) error {
	var started func(pid int) error
	if g := h.st.Cgroup; g != nil {
		release, err := g.PrepareStart(cmd)
		if err != nil {
			return err
		}
		defer release()
		started = func(pid int) error {
			if err := g.Started(pid); err != nil {
				_ = cmd.Wait()
				return fmt.Errorf("failed to put the command in the task's cgroup: %w", err)
			}
			return nil
		}
	}
	if !h.st.Isolated {
		if started == nil {
			return launch.StartInNetNS(cmd, h.cfg.NetNSPath)
		}
		return isolate.StartInNetNSThen(cmd, h.cfg.NetNSPath, started)
	}
	caps := h.st.Caps
	if caps == nil { // recorded before tasks had their own set
		if iso, err := d.planIsolation(&taskConfig{}); err == nil {
			caps = iso.caps.Names()
		}
	}
	return isolate.StartInTask(cmd, isolate.Target{
		PID: h.st.TaskPID, StartTime: h.st.TaskStartTime, NetNSPath: h.cfg.NetNSPath,
		Caps: caps, Added: h.st.AddedCaps, Started: started,
	})
}
