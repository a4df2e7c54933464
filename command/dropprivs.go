package command

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// dropPrivileges makes the process run as name from now on: its groups,
// gid and uid (every thread: Go's Setuid applies to all of them), which
// empties its capabilities. It does nothing unless the process runs as
// root. Callers set no_new_privs first (ensureNoNewPrivs). A sidecar calls
// it before it serves anything, the built-in proxy and Envoy alike: they
// need only their allocation's socket (0666), unprivileged ports and their
// standard streams (and Envoy its bootstrap, handed over in memory).
func dropPrivileges(name string) error {
	if os.Geteuid() != 0 || name == "" || name == "root" {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("failed to look up user %q: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("user %q has a non-numeric uid %q", name, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("user %q has a non-numeric gid %q", name, u.Gid)
	}
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("failed to set the groups of %q: %w", name, err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("failed to set gid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("failed to set uid %d: %w", uid, err)
	}
	return nil
}

// nnpEnv marks a process that re-executed itself with no_new_privs set.
const nnpEnv = "MESHLET_NO_NEW_PRIVS"

// ensureNoNewPrivs gives the whole process no_new_privs: the flag is per
// thread and Go cannot set it on every thread of a running (cgo) process,
// but a thread that has it passes it to the image it executes. So, once,
// the process sets it on a locked thread and executes itself again from
// that thread. A process that has it already returns at once.
func ensureNoNewPrivs() error {
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil && v == 1 {
		return nil
	}
	if os.Getenv(nnpEnv) != "" {
		return fmt.Errorf("no_new_privs is not set after re-executing with it")
	}
	runtime.LockOSThread() // never unlocked: the thread execs or the process fails
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to set no_new_privs: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("failed to find the executable to re-execute: %w", err)
	}
	err = syscall.Exec(exe, os.Args, append(os.Environ(), nnpEnv+"=1"))
	return fmt.Errorf("failed to re-execute with no_new_privs: %w", err)
}

// socketFromDir makes the process's working directory the directory of a
// unix:///path socket address and returns the address relative to it
// ("unix:name"): the socket stays reachable (and so do reconnections)
// after dropPrivileges, even when a directory above it (the agent's
// 0700 data dir) is closed to the new user. Other addresses are returned
// as they are.
func socketFromDir(addr string) (string, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || os.Geteuid() != 0 {
		return addr, nil
	}
	if err := os.Chdir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("failed to enter the control plane socket's directory: %w", err)
	}
	return "unix:" + filepath.Base(path), nil
}
