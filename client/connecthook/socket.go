package connecthook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// ErrUnsafeSocketDir: the directory meant for the control plane's socket
// is not a directory only the agent's user can write.
var ErrUnsafeSocketDir = errors.New("socket directory is not owned by the agent or is writable by others")

// prepareSocket makes path free for the agent to listen on. Its directory
// must be a real directory (not a link) owned by the agent's user and
// writable by nobody else (the alloc dir's run/), so only the agent can
// have put anything there. A stale socket of the agent's is removed; any
// other file (a link, a regular file) is moved aside, never followed nor
// deleted, and logged.
func prepareSocket(path string, logger hclog.Logger) error {
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return err
	}
	fi, err := removeAgentSocket(path)
	if err != nil || fi == nil {
		return err
	}
	aside := path + ".unexpected-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	logger.Warn("moving an unexpected file away from the control plane socket's path", "path", path, "mode", fi.Mode().String(), "moved_to", aside)
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("failed to move unexpected file %s aside: %w", path, err)
	}
	return nil
}

// checkSocketDir refuses a socket directory that is not a real directory
// (not a link) owned by the agent's user and writable by nobody else.
func checkSocketDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("failed to check socket directory: %w", err)
	}
	if err := ownedByAgent(fi, dir); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 || !fi.IsDir() {
		return fmt.Errorf("%s (mode %v): %w", dir, fi.Mode(), ErrUnsafeSocketDir)
	}
	return nil
}

// removeStaleSocket removes the agent's socket at path. The control plane
// removes the sockets it serves, but after an agent restart the one a
// previous agent served for an allocation that ended is left (this agent
// never served it). Anything but a socket of the agent's user is left
// alone; a missing path or directory is success.
func removeStaleSocket(path string) error {
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	_, err := removeAgentSocket(path)
	return err
}

// removeAgentSocket removes path if it is a socket of the agent's user.
// It returns the info of anything else found there (nil when nothing is
// left).
func removeAgentSocket(path string) (os.FileInfo, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to check socket path: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 || ownedByAgent(fi, path) != nil {
		return fi, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to remove stale socket: %w", err)
	}
	return nil, nil
}

func ownedByAgent(fi os.FileInfo, path string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w", path, ErrUnsafeSocketDir)
	}
	return nil
}

// legacySocketPath is where meshlet placed the socket before alloc/run
// (alloc/tmp, writable by every task). Sidecars started then, and jobs
// registered then (their injected sidecar task names that path), still
// dial it.
func legacySocketPath(sharedDir string) string {
	return filepath.Join(sharedDir, "tmp", connect.SocketName)
}

// usesLegacySocket: the allocation may have sidecars that dial the legacy
// path (a restored allocation, or a sidecar task whose arguments name it).
func usesLegacySocket(hc *allocrunner.AllocHookContext, tg *structs.TaskGroup) bool {
	if hc.Restored {
		return true
	}
	for _, t := range tg.Tasks {
		args, _ := t.Config["args"].([]any)
		for _, a := range args {
			if s, ok := a.(string); ok && strings.HasSuffix(s, "/tmp/"+connect.SocketName) {
				return true
			}
		}
	}
	return false
}

// linkLegacySocket points the legacy path at the socket with a link the
// agent owns (alloc/tmp is sticky: no task can remove or replace it). It
// is best effort and never fails the allocation: a file someone else put
// there is left alone (never followed) and logged; the sidecars that dial
// that path then cannot connect, the others are unaffected.
func linkLegacySocket(sharedDir string, logger hclog.Logger) {
	legacy := legacySocketPath(sharedDir)
	target := filepath.Join("..", connect.SocketDir, connect.SocketName)
	fi, err := os.Lstat(legacy)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		logger.Warn("cannot check the legacy socket path", "path", legacy, "error", err)
		return
	case ownedByAgent(fi, legacy) == nil && fi.Mode()&os.ModeSymlink != 0:
		if dest, _ := os.Readlink(legacy); dest == target {
			return
		}
		fallthrough
	case ownedByAgent(fi, legacy) == nil && fi.Mode()&(os.ModeSocket|os.ModeSymlink) != 0:
		if err := os.Remove(legacy); err != nil {
			logger.Warn("cannot replace the agent's old socket at the legacy path", "path", legacy, "error", err)
			return
		}
	default:
		logger.Warn("a file the agent did not make sits at the legacy socket path; sidecars dialling it cannot connect",
			"path", legacy, "mode", fi.Mode().String())
		return
	}
	if err := os.Symlink(target, legacy); err != nil {
		logger.Warn("cannot link the legacy socket path", "path", legacy, "error", err)
	}
}
