package isolate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver/internal/launch"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// ErrTaskGone is returned by StartInTask when the task's process is no
// longer the one recorded (exited, or its PID reused).
var ErrTaskGone = errors.New("task process is gone")

// Target is a running isolated task to start a command in.
type Target struct {
	// PID and StartTime identify the task's process (host view).
	PID       int
	StartTime uint64
	// NetNSPath is the task's network namespace ("" keeps the caller's).
	NetNSPath string
	// Caps is the task's bounding set (names as in DefaultCaps); Added are
	// its cap_add capabilities, ambient for a non-root command.
	Caps  []string
	Added []string
	// Started, if set, runs right after the command started, on the OS
	// thread that started it; its error is StartInTask's.
	Started func(pid int) error
}

// entered are the namespaces a command joins, by /proc/<pid>/ns name. The
// mount namespace cannot be joined by a multi-threaded process; the command
// is chrooted into the task's root (/proc/<pid>/root) instead, which gives
// it the same mount tree.
var entered = []struct {
	name string
	flag int
}{{"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}, {"pid", unix.CLONE_NEWPID}}

// StartInTask starts cmd inside the task t: in its PID, IPC, UTS (and
// network) namespaces, chrooted into its root, with the task's bounding set
// and no_new_privs; a command run as a non-root user gets the task's
// added capabilities as ambient ones, as the task did. cmd.Path must be a
// path inside the task's root (see LookPathIn) and cmd.Dir one inside it
// too; the caller sets the user (SysProcAttr.Credential). cmd's stdio must
// be *os.File or nil, so that cmd.Start starts no goroutine.
func StartInTask(cmd *exec.Cmd, t Target) error {
	keep, err := ParseCaps(t.Caps)
	if err != nil {
		return err
	}
	added, err := ParseCaps(t.Added)
	if err != nil {
		return err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	uid := uint32(os.Getuid())
	if cred := cmd.SysProcAttr.Credential; cred != nil {
		uid = cred.Uid
	}
	cmd.SysProcAttr.AmbientCaps = ambientCaps(ambientFor(uid, added&keep))
	return onDiscardedThread(func() error { return enterAndStart(cmd, t, keep) })
}

// StartInNetNS starts cmd in the network namespace at nsPath (if set). It
// is for the executor of an isolated task, whose PID differs from the
// host's /proc (CNI's ns package locates the current namespace there).
func StartInNetNS(cmd *exec.Cmd, nsPath string) error {
	if nsPath == "" {
		return cmd.Start()
	}
	return StartInNetNSThen(cmd, nsPath, nil)
}

// StartInNetNSThen is StartInNetNS that runs started (if set) right after
// cmd started, on the OS thread that started it.
func StartInNetNSThen(cmd *exec.Cmd, nsPath string, started func(pid int) error) error {
	return onDiscardedThread(func() error {
		if nsPath != "" {
			if err := setnsPath(nsPath, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("failed to enter network namespace %s: %w", nsPath, err)
			}
		}
		return startThen(cmd, started)
	})
}

// startThen starts cmd, then runs started (if set) on the same thread.
func startThen(cmd *exec.Cmd, started func(pid int) error) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	if started == nil {
		return nil
	}
	return started(cmd.Process.Pid)
}

// onDiscardedThread runs fn on a goroutine locked to its OS thread and
// never unlocked: fn may change the thread's namespaces and privileges,
// and the runtime terminates the thread when the goroutine returns.
func onDiscardedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

func setnsPath(path string, flag int) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setns(fd, flag)
}

func enterAndStart(cmd *exec.Cmd, t Target, keep CapSet) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	open := func(path string, flags int) (int, error) {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("failed to open %s: %w", path, err)
		}
		fds = append(fds, fd)
		return fd, nil
	}
	proc := "/proc/" + strconv.Itoa(t.PID)
	rootFD, err := open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	nsFDs := make([]int, len(entered))
	for i, ns := range entered {
		if nsFDs[i], err = open(proc+"/ns/"+ns.name, unix.O_RDONLY); err != nil {
			return err
		}
	}
	// The descriptors pin the task's root and namespaces; make sure they
	// are the task's and not a process that reused its PID.
	if !procfs.Alive(t.PID, t.StartTime) {
		return ErrTaskGone
	}
	if t.NetNSPath != "" {
		if err := setnsPath(t.NetNSPath, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("failed to enter network namespace %s: %w", t.NetNSPath, err)
		}
	}
	for i, ns := range entered {
		if err := unix.Setns(nsFDs[i], ns.flag); err != nil {
			return fmt.Errorf("failed to enter the task's %s namespace: %w", ns.name, err)
		}
	}
	if err := restrictThread(keep); err != nil {
		return err
	}
	// The child resolves /proc/self in the host's procfs: this is the
	// task's root, pinned by the descriptor it inherits until it execs.
	cmd.SysProcAttr.Chroot = "/proc/self/fd/" + strconv.Itoa(rootFD)
	unix.CloseOnExec(rootFD)
	return startThen(cmd, t.Started)
}

// LookPathIn resolves command as the task sees it, in the task's root
// (/proc/<pid>/root): a name with a slash relative to dir, a bare name in
// env's PATH. The result is a path inside the task's root.
func LookPathIn(pid int, command string, env map[string]string, dir string) (string, error) {
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	search, ok := env["PATH"]
	if !ok {
		search = launch.DefaultPath
	}
	dirs := filepath.SplitList(search)
	for i, d := range dirs {
		if filepath.IsAbs(d) {
			dirs[i] = filepath.Join(root, d)
		}
	}
	hostCommand := command
	if filepath.IsAbs(command) {
		hostCommand = filepath.Join(root, command)
	}
	path, err := launch.LookPath(hostCommand, map[string]string{"PATH": strings.Join(dirs, string(os.PathListSeparator))}, filepath.Join(root, dir))
	if err != nil {
		return "", fmt.Errorf("failed to find %q in the task: %w", command, err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("failed to find %q in the task: outside its root", command)
	}
	return "/" + rel, nil
}
