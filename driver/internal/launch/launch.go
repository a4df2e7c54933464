// Package launch holds the process-launching rules the executor and the
// drivers' exec path share: resolving a command against the task's own PATH,
// building the task's exact environment, switching to the task's user, and
// starting a command inside a network namespace.
//
// Concurrency: every function is safe for concurrent use. StartInNetNS runs
// cmd.Start on a locked OS thread switched into the namespace; the command's
// stdio must be *os.File (or nil) so that os/exec starts no goroutine there.
package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// DefaultPath is used to resolve commands when the task's env has no PATH.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath resolves command the way the task would see it: a name with a
// slash is taken relative to dir, a bare name is searched in the task env's
// PATH (not the agent's). A name not found wraps exec.ErrNotFound.
func LookPath(command string, env map[string]string, dir string) (string, error) {
	if command == "" {
		return "", errors.New("command is empty")
	}
	if strings.Contains(command, "/") {
		path := command
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := checkExecutable(path); err != nil {
			return "", fmt.Errorf("exec: %q: %w", command, err)
		}
		return path, nil
	}
	search, ok := env["PATH"]
	if !ok {
		search = DefaultPath
	}
	for _, d := range filepath.SplitList(search) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		path := filepath.Join(d, command)
		if checkExecutable(path) == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("exec: %q: %w", command, exec.ErrNotFound)
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w", path, os.ErrPermission)
	}
	return nil
}

// EnvList turns the task's env map into a sorted "K=V" list: exactly the
// given variables, nothing inherited.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Credential returns the credential to run as name, or nil when name is
// empty or already the current user. Switching users requires root.
func Credential(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	cred, err := LookupCredential(name)
	if err != nil {
		return nil, err
	}
	if int(cred.Uid) == os.Geteuid() {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("failed to run as user %q: switching users requires root", name)
	}
	return cred, nil
}

// LookupCredential returns user name's uid, primary gid and groups.
func LookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("failed to look up user %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("failed to parse ids of user %q: %w", name, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, nil
}

// StartInNetNS starts cmd, inside the network namespace at nsPath when it
// is set. The child inherits the namespace of the locked thread that forks
// it; nothing else in the process changes namespace.
func StartInNetNS(cmd *exec.Cmd, nsPath string) error {
	if nsPath == "" {
		return cmd.Start()
	}
	var startErr error
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		startErr = cmd.Start()
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to enter network namespace %s: %w", nsPath, err)
	}
	return startErr
}

// ParseSignal accepts "SIGTERM", "TERM", "sigterm" or "15". An empty name
// is def.
func ParseSignal(name string, def syscall.Signal) (syscall.Signal, error) {
	if name == "" {
		return def, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("invalid signal %q", name)
		}
		return syscall.Signal(n), nil
	}
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	s := unix.SignalNum(up)
	if s == 0 {
		return 0, fmt.Errorf("invalid signal %q", name)
	}
	return s, nil
}

// CloexecInherited marks every descriptor from 3 up close-on-exec, so that
// descriptors this process inherited without the flag (from whatever
// started it) do not leak into the commands it starts. Descriptors Go opens
// already carry the flag; os/exec's ExtraFiles are unaffected.
func CloexecInherited() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= 3 {
			unix.CloseOnExec(fd)
		}
	}
}
