// Package isolate runs a task the way Nomad's exec driver does: chrooted
// (pivot_root) into its task directory in new mount, IPC and UTS namespaces,
// with the host's read-only chroot_env bound in, a fresh /proc, a minimal
// /dev, no_new_privs, a reduced capability bounding set and the task's user
// (nobody by default). A non-root task gets the capabilities it added
// (cap_add) as ambient capabilities; see [TaskCaps] for how the sets are
// computed. It also starts `alloc exec` commands inside a running isolated
// task.
//
// The executor (driver/executor) is started by the driver in a new PID
// namespace, whose init (PID 1) it is: it reaps every orphan, forwards
// signals, and the task is its child (PID 2), so signals and exit codes
// behave as for raw_exec. With pid_mode "host" ([Config].HostPID) the
// executor stays in the host's PID namespace as the task's subreaper
// instead ([BecomeSubreaper], [KillDescendants]); with ipc_mode "host"
// ([Config].HostIPC) the task keeps the host's IPC namespace. Go cannot
// run code between fork and exec, so the executor re-executes itself as a
// short-lived "stage" ([StageArg]) in the new mount/IPC/UTS namespaces:
// the stage reads its [Config] from fd 3,
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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver/internal/procfs"
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

// DefaultChrootEnv is Nomad's default chroot_env set, as host path → path
// in the task's root (those that exist are bound read-only).
func DefaultChrootEnv() map[string]string {
	env := map[string]string{}
	for _, p := range []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr"} {
		env[p] = p
	}
	return env
}

// DefaultCaps is Nomad's default exec capability set: the default
// allow_caps, and the bounding set of an isolated task that neither adds
// nor drops any (a root task holds these; other users none).
func DefaultCaps() []string {
	return []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
		"net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}
}

// Bind is one chroot_env entry: the host's Source is bound read-only at
// Dest inside the task's root.
type Bind struct {
	Source string `json:"source"`
	Dest   string `json:"dest"`
}

// ChrootBinds turns a chroot_env map (host path → path in the root) into
// binds ordered so that a parent is bound before what lies under it.
func ChrootBinds(env map[string]string) []Bind {
	binds := make([]Bind, 0, len(env))
	for src, dst := range env {
		binds = append(binds, Bind{Source: filepath.Clean(src), Dest: filepath.Clean(dst)})
	}
	sort.Slice(binds, func(i, j int) bool {
		if binds[i].Dest != binds[j].Dest {
			return binds[i].Dest < binds[j].Dest
		}
		return binds[i].Source < binds[j].Source
	})
	return binds
}

// Config is what the stage needs to build the root and exec the task.
type Config struct {
	// RootDir is the task directory on the host: it becomes "/".
	RootDir string `json:"root_dir"`
	// AllocDir is the shared alloc directory on the host, bound at /alloc.
	AllocDir string `json:"alloc_dir,omitempty"`
	// ReadOnly are the host paths (directories or files) bound read-only
	// into the root, in order; a missing source is skipped, as Nomad skips
	// a missing chroot_env entry.
	ReadOnly []Bind `json:"read_only"`
	// Command is resolved inside the new root against Env's PATH.
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	// Dir is the working directory inside the root; default "/".
	Dir    string   `json:"dir,omitempty"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// Caps is the bounding set kept (names as in DefaultCaps); Added are
	// the capabilities the task added (cap_add), raised as ambient
	// capabilities when UID is not root.
	Caps  []string `json:"caps"`
	Added []string `json:"added,omitempty"`
	// HostPID and HostIPC share the host's PID and IPC namespaces
	// (pid_mode and ipc_mode "host") instead of new ones.
	HostPID bool `json:"host_pid,omitempty"`
	HostIPC bool `json:"host_ipc,omitempty"`
}

// Start starts cmd (which must run the stage: the executor binary with
// StageArg) with cfg, through startFn (which may wrap cmd.Start to enter a
// cgroup or network namespace). It returns once the task was exec'd, with
// the task's PID in the host's PID namespace (cmd.Process.Pid is the
// executor's view), or with why the stage failed (the stage is reaped).
func Start(cmd *exec.Cmd, cfg *Config, startFn func(*exec.Cmd) error) (hostPID int, err error) {
	if !cfg.HostPID && os.Getpid() != 1 {
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
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS | unix.CLONE_NEWUTS
	if !cfg.HostIPC {
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWIPC
	}
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

// BecomeSubreaper makes the calling process the reaper of its orphaned
// descendants (PR_SET_CHILD_SUBREAPER): the executor of a task in the
// host's PID namespace (pid_mode "host"), which is not the init of a
// namespace of its own, so that the task cannot leave processes behind.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to become the task's subreaper: %w", err)
	}
	return nil
}

// KillDescendants kills every descendant of the calling process and reaps
// them as they become its children (all do once it is a subreaper, see
// BecomeSubreaper), rescanning for processes forked meanwhile. It gives up
// after killWait.
func KillDescendants() {
	self := os.Getpid()
	deadline := time.Now().Add(killWait)
	for {
		left := procfs.Tree(self)[1:]
		for _, pid := range left {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || got <= 0 {
				break
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killWait bounds KillDescendants.
const killWait = 5 * time.Second

// WaitTask reaps children until pid exits and returns its wait status;
// orphans that reparented to the executor (PID 1, or subreaper) are
// reaped on the way.
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
