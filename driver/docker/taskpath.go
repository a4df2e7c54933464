package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// checkSourcesBeneath refuses a relative volume or bind mount source that
// leaves the task directory through a symlink. Without volumes { enabled }
// a task may only bind paths in its task directory, which it can write
// (local/): a link it planted there on an earlier run (local/data -> /)
// would otherwise bind that host path into its container.
func checkSourcesBeneath(taskDir string, tc *taskConfig) error {
	for _, v := range tc.Volumes {
		src, _, _ := strings.Cut(v, ":")
		if filepath.IsAbs(src) {
			continue
		}
		if err := checkBeneath(taskDir, src); err != nil {
			return fmt.Errorf("volume %q: %w; host paths outside the task directory are %w: set volumes { enabled = true }", v, err, ErrNotAllowed)
		}
	}
	for _, mt := range tc.Mounts {
		if mt.Type != "bind" || filepath.IsAbs(mt.Source) {
			continue
		}
		if err := checkBeneath(taskDir, mt.Source); err != nil {
			return fmt.Errorf("bind mount of %q: %w; host paths outside the task directory are %w: set volumes { enabled = true }", mt.Source, err, ErrNotAllowed)
		}
	}
	return nil
}

// checkBeneath resolves rel below dir without following any symlink. A
// missing tail is accepted (docker creates it as directories), a symlink on
// the existing part is not.
func checkBeneath(dir, rel string) error {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to open task directory: %w", err)
	}
	defer unix.Close(d)
	fd, err := unix.Openat2(d, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		unix.Close(fd)
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%s passes through a symlink in the task directory", rel)
	default:
		// ENOSYS (before Linux 5.6), EPERM (a seccomp filter), ENOENT (a
		// missing tail): walk the existing part.
		return walkBeneath(dir, rel)
	}
}

// walkBeneath is checkBeneath with Lstat, component by component.
func walkBeneath(dir, rel string) error {
	p := dir
	for _, c := range strings.Split(filepath.Clean(rel), "/") {
		if c == "." {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("failed to check %s: %w", rel, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s passes through a symlink in the task directory", rel)
		}
	}
	return nil
}
