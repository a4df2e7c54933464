// Package nofollow opens directories a task can write into (its task
// directory, secrets/, alloc/logs) without following a symlink the task
// planted there, so that the agent, running as root, never reads, writes or
// binds a host path through one. Paths below a directory are walked one
// element at a time, each opened relative to the descriptor of the one
// before with O_NOFOLLOW.
//
// It holds no state: every function is safe for concurrent use.
package nofollow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Sentinel errors of CheckBeneath (and, for ErrOutside, OpenParent).
var (
	// ErrSymlink is returned for a path that passes through a symlink.
	ErrSymlink = errors.New("passes through a symlink")
	// ErrOutside is returned for a relative path that climbs out of its
	// directory ("..").
	ErrOutside = errors.New("leads outside its directory")
)

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// OpenDir opens the directory at path for use with the *at calls. A
// symlink at path's last element is refused, not followed (the kernel says
// ELOOP or ENOTDIR, depending on the link); the elements before it resolve
// as usual. Errors are *os.PathError.
func OpenDir(path string) (*os.File, error) {
	fd, err := openDir(path)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

func openDir(path string) (int, error) {
	fd, err := unix.Open(path, dirFlags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// OpenParent opens root with OpenDir, then each directory of rel's parent
// below it in turn without following a symlink, creating a missing one
// (mode 0755) when create is set. It returns the innermost directory (named
// root) and rel's last element, which the caller opens relative to it. A
// symlink on the way fails with an error wrapping ErrSymlink.
func OpenParent(root, rel string, create bool) (*os.File, string, error) {
	fd, err := openDir(root)
	if err != nil {
		return nil, "", err
	}
	fd, base, err := walkParent(fd, root, rel, create)
	if err != nil {
		return nil, "", err
	}
	return os.NewFile(uintptr(fd), root), base, nil
}

// walkParent walks from the directory fd (which it takes over) down rel's
// parent directories and returns the innermost one's descriptor.
func walkParent(fd int, root, rel string, create bool) (int, string, error) {
	parts := strings.Split(filepath.Clean(rel), string(filepath.Separator))
	for _, part := range parts {
		if part == ".." {
			_ = unix.Close(fd)
			return -1, "", fmt.Errorf("%s: %w", rel, ErrOutside)
		}
	}
	for _, part := range parts[:len(parts)-1] {
		if part == "." || part == "" {
			continue
		}
		next, err := unix.Openat(fd, part, dirFlags, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, part, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, part, dirFlags, 0)
			}
		}
		if err != nil {
			err = markLink(fd, part, err)
			_ = unix.Close(fd)
			return -1, "", fmt.Errorf("failed to open directory %q under %s (links are not followed): %w", part, root, err)
		}
		_ = unix.Close(fd)
		fd = next
	}
	return fd, parts[len(parts)-1], nil
}

// markLink adds ErrSymlink to err, the failure to open name in dir as a
// directory, if name is a symlink (the kernel says ELOOP or ENOTDIR,
// depending on the link).
func markLink(dir int, name string, err error) error {
	var st unix.Stat_t
	if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) &&
		unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	return err
}

// CheckBeneath checks that rel, below the directory dir, passes through no
// symlink (not even one that stays inside dir) and does not climb out of
// it; refusals wrap ErrSymlink or ErrOutside. Only the existing part of rel
// is walked: a missing tail is accepted.
func CheckBeneath(dir, rel string) error {
	fd, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", dir, err)
	}
	fd, base, err := walkParent(fd, dir, rel, false)
	switch {
	case errors.Is(err, ErrSymlink):
		return fmt.Errorf("%s: %w", rel, ErrSymlink)
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	err = unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return fmt.Errorf("failed to check %s: %w", rel, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%s: %w", rel, ErrSymlink)
	}
	return nil
}
