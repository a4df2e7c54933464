// Package isolate runs a task the way Nomad's exec driver does: chrooted
// (pivot_root) into its task directory in new mount, IPC and UTS namespaces,
// with the host's read-only chroot_env bound in, a fresh /proc, a minimal
// /dev, no_new_privs, a reduced capability bounding set and the task's user
// (nobody by default). It also starts `alloc exec` commands inside a running
// isolated task.
//
// The executor (driver/executor) is started by the driver in a new PID
// namespace, whose init (PID 1) it is: it reaps every orphan, forwards
// signals, and the task is its child (PID 2), so signals and exit codes
// behave as for raw_exec. Go cannot run code between fork and exec, so the
// executor re-executes itself as a short-lived "stage" ([StageArg]) in the
// new mount/IPC/UTS namespaces: the stage reads its [Config] from fd 3,
// builds the root, drops privileges on its (locked) thread and execs the
// task; a failure before the exec is written to fd 4 (close-on-exec, so a
// successful exec reads as EOF).
//
// Concurrency: Start and StartInTask are safe for concurrent use. Functions
// that change a thread's namespaces or privileges do so on a goroutine
// locked to its OS thread that never unlocks it, so the Go runtime discards
// that thread; the rest of the process never changes.
package isolate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StageArg is the executor argument that selects the stage entry point
// (see driver/executor.Main).
const StageArg = "isolate-stage"

// DefaultUser is the user an isolated task runs as when it sets none.
const DefaultUser = "nobody"

// ErrSharedMountNS is returned by the stage when it was not started in a
// mount namespace of its own.
var ErrSharedMountNS = errors.New("not in a new mount namespace")

// ErrNotInit is returned when an isolated task is started by a process
// that is not the init of its own PID namespace.
var ErrNotInit = errors.New("isolated tasks need an executor that is PID 1 of a new PID namespace")

// DefaultChrootEnv is Nomad's default chroot_env set (the directories that
// exist are bound read-only into the task's root at the same path).
func DefaultChrootEnv() []string {
	return []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr"}
}

// DefaultCaps is Nomad's default exec allow-list: the capability bounding
// set of an isolated task (a root task gets these; others none).
func DefaultCaps() []string {
	return []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
		"net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}
}

// Config is what the stage needs to build the root and exec the task.
type Config struct {
	// RootDir is the task directory on the host: it becomes "/".
	RootDir string `json:"root_dir"`
	// AllocDir is the shared alloc directory on the host, bound at /alloc.
	AllocDir string `json:"alloc_dir,omitempty"`
	// ReadOnly are host directories bound read-only at the same path;
	// missing ones are skipped.
	ReadOnly []string `json:"read_only"`
	// Command is resolved inside the new root against Env's PATH.
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	// Dir is the working directory inside the root; default "/".
	Dir    string   `json:"dir,omitempty"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// Caps is the bounding set kept (names as in DefaultCaps).
	Caps []string `json:"caps"`
}

// Start starts cmd (which must run the stage: the executor binary with
// StageArg) with cfg, through startFn (which may wrap cmd.Start to enter a
// cgroup or network namespace). It returns once the task was exec'd, with
// the task's PID in the host's PID namespace (cmd.Process.Pid is the
// executor's view), or with why the stage failed (the stage is reaped).
func Start(cmd *exec.Cmd, cfg *Config, startFn func(*exec.Cmd) error) (hostPID int, err error) {
	if os.Getpid() != 1 {
		return 0, ErrNotInit
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("failed to create stage config pipe: %w", err)
	}
	defer cfgW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return 0, fmt.Errorf("failed to create stage error pipe: %w", err)
	}
	defer errR.Close()
	pidfd := -1
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
	cmd.SysProcAttr.PidFD = &pidfd
	cmd.ExtraFiles = []*os.File{cfgR, errW}
	err = startFn(cmd)
	cfgR.Close()
	errW.Close()
	if err != nil {
		return 0, err
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	stageErr := json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	msg, _ := io.ReadAll(io.LimitReader(errR, 4096))
	if len(msg) == 0 && stageErr == nil {
		hostPID, err = pidfdPID(pidfd)
		if err == nil {
			return hostPID, nil
		}
		_ = cmd.Process.Kill()
	}
	_ = cmd.Wait()
	switch {
	case len(msg) > 0:
		return 0, fmt.Errorf("failed to start isolated task: %s", strings.TrimSpace(string(msg)))
	case stageErr != nil:
		return 0, fmt.Errorf("failed to send the stage its config: %w", stageErr)
	}
	return 0, err
}

// pidfdPID reads a pidfd's PID as the host sees it: /proc is the host's
// procfs, whose fdinfo shows PIDs in its own namespace.
func pidfdPID(fd int) (int, error) {
	if fd < 0 {
		return 0, errors.New("failed to identify the task: no pidfd (kernel older than 5.3?)")
	}
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, fmt.Errorf("failed to identify the task: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("failed to identify the task: bad pidfd info %q", v)
			}
			return pid, nil
		}
	}
	return 0, errors.New("failed to identify the task: pidfd info has no Pid")
}

// ReapAll kills and reaps every process left in the executor's PID
// namespace (a task's daemonised children) once the task exited. It does
// nothing unless the caller is PID 1 of a namespace: kill(-1) from
// anywhere else would reach the whole host.
func ReapAll() {
	if os.Getpid() != 1 {
		return
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
	}
}

// WaitTask reaps children until pid exits and returns its wait status;
// orphans that reparented to the executor (PID 1) are reaped on the way.
func WaitTask(pid int) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("failed to wait for the task: %w", err)
		}
		if got == pid {
			return ws, nil
		}
	}
}
