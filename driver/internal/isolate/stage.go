package isolate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver/internal/launch"
)

// Stage descriptors, as set up by Start.
const (
	stageConfigFD = 3
	stageErrorFD  = 4
)

// StageMain is the stage's entry point (the executor dispatches StageArg to
// it). It only returns on failure, with the process exit code, after
// writing the reason to the error descriptor.
func StageMain() int {
	// Everything below runs on this thread: the exec keeps its
	// credentials, bounding set and no_new_privs.
	runtime.LockOSThread()
	launch.CloexecInherited()
	errFile := os.NewFile(stageErrorFD, "stage-error")
	err := stage()
	if errFile != nil {
		_, _ = fmt.Fprintln(errFile, err)
	}
	return 1
}

// stage reads the config, builds the root, drops privileges and execs the
// task; it returns only on failure.
func stage() error {
	f := os.NewFile(stageConfigFD, "stage-config")
	if f == nil {
		return errors.New("stage: no config descriptor")
	}
	var c Config
	err := json.NewDecoder(f).Decode(&c)
	f.Close()
	if err != nil {
		return fmt.Errorf("failed to read stage config: %w", err)
	}
	keep, err := ParseCaps(c.Caps)
	if err != nil {
		return err
	}
	added, err := ParseCaps(c.Added)
	if err != nil {
		return err
	}
	if err := checkOwnMountNS(); err != nil {
		return err
	}
	if err := setupRoot(&c); err != nil {
		return err
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("failed to enter working directory %s: %w", dir, err)
	}
	path, err := launch.LookPath(c.Command, envMap(c.Env), dir)
	if err != nil {
		return err
	}
	if err := dropPrivileges(&c, keep, ambientFor(c.UID, added&keep)); err != nil {
		return err
	}
	argv := append([]string{c.Command}, c.Args...)
	if err := unix.Exec(path, argv, c.Env); err != nil {
		return fmt.Errorf("failed to exec %s: %w", path, err)
	}
	return nil
}

// checkOwnMountNS makes sure the stage never rebuilds its parent's (the
// host's) mounts: it must have been cloned into a new mount namespace.
// /proc is still the host's here, so PPid is the parent's host PID.
func checkOwnMountNS() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	ppid := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid = strings.TrimSpace(v)
		}
	}
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	parent, err2 := os.Readlink("/proc/" + ppid + "/ns/mnt")
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("stage: failed to compare mount namespaces: %w", err)
	}
	if self == parent {
		return fmt.Errorf("stage: %w", ErrSharedMountNS)
	}
	return nil
}

// dropPrivileges restricts the thread to the bounding set keep, switches
// it to the task's user and raises amb as its ambient capabilities.
func dropPrivileges(c *Config, keep, amb CapSet) error {
	if err := restrictThread(keep); err != nil {
		return err
	}
	if amb != 0 {
		if err := keepCapsAcrossSetuid(); err != nil {
			return err
		}
	}
	if err := setIDs(c.UID, c.GID, c.Groups); err != nil {
		return err
	}
	if amb != 0 {
		return raiseAmbient(amb)
	}
	return nil
}

// setIDs switches the calling thread (only: it execs next) to the task's
// user. Raw syscalls on purpose: Go's wrappers change every thread.
func setIDs(uid, gid uint32, groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("failed to set groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("failed to set gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("failed to set uid %d: %w", uid, e)
	}
	return nil
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
