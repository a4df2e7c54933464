package connecthook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
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
	dir := filepath.Dir(path)
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
	fi, err = os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to check socket path: %w", err)
	}
	if fi.Mode()&os.ModeSocket != 0 && ownedByAgent(fi, path) == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("failed to remove stale socket: %w", err)
		}
		return nil
	}
	aside := path + ".unexpected-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	logger.Warn("moving an unexpected file away from the control plane socket's path", "path", path, "mode", fi.Mode().String(), "moved_to", aside)
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("failed to move unexpected file %s aside: %w", path, err)
	}
	return nil
}

func ownedByAgent(fi os.FileInfo, path string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w", path, ErrUnsafeSocketDir)
	}
	return nil
}
