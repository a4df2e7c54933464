package executor

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/meshlet/meshlet/driver/internal/isolate"
	"github.com/meshlet/meshlet/driver/internal/launch"
)

// startIsolated starts the task through the isolate stage: chrooted into
// its task dir, in new mount/IPC/UTS namespaces (the PID namespace is the
// executor's own; the host's IPC namespace with HostIPC), as its user with
// reduced privileges. The task's directories are given to its user first.
func (e *executor) startIsolated(stdout, stderr *os.File) (*exec.Cmd, int, error) {
	iso := e.spec.Isolation
	user := e.spec.User
	if user == "" {
		user = isolate.DefaultUser
	}
	cred, err := launch.LookupCredential(user)
	if err != nil {
		return nil, 0, err
	}
	if iso.HostPID {
		if err := isolate.BecomeSubreaper(); err != nil {
			return nil, 0, err
		}
	}
	if err := isolate.ChownTaskDir(e.spec.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return nil, 0, err
	}
	cfg := &isolate.Config{
		RootDir:  e.spec.Dir,
		AllocDir: iso.AllocDir,
		ReadOnly: iso.ReadOnly,
		Command:  e.spec.Command,
		Args:     e.spec.Args,
		Env:      launch.EnvList(e.spec.Env),
		Dir:      "/",
		UID:      cred.Uid,
		GID:      cred.Gid,
		Groups:   cred.Groups,
		Caps:     iso.Caps,
		Added:    iso.Added,
		HostPID:  iso.HostPID,
		HostIPC:  iso.HostIPC,
	}
	cmd := &exec.Cmd{
		Path:        iso.StageCmd[0],
		Args:        append(append([]string{}, iso.StageCmd...), isolate.StageArg),
		Env:         []string{},
		Dir:         "/",
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	pid, err := isolate.Start(cmd, cfg, e.startInGroup)
	if err != nil {
		return nil, 0, err
	}
	return cmd, pid, nil
}
