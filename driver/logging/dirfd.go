package logging

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The log directory is writable by the task (alloc/logs is under /alloc), and
// the agent and the executor that read and write it run as root on the host:
// a task may plant a symlink, a FIFO or a directory at any log file's name.
// Log files are therefore only opened relative to a descriptor of the
// directory, without following symlinks or blocking, and only regular files
// are used.

// ErrNotRegular is returned when something other than a regular file (a
// symlink, a FIFO, a directory...) sits at a log file's name.
var ErrNotRegular = errors.New("not a regular file")

// openDir opens path for use with the *at calls, refusing a symlink in its
// place.
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openRegular opens name in dir with flags (O_RDONLY, or O_WRONLY|O_APPEND
// with or without O_CREAT) and returns it only if it is a regular file. A
// symlink, FIFO, socket, device or directory at name yields ErrNotRegular; a
// FIFO never blocks the open.
func openRegular(dir *os.File, name string, flags int) (*os.File, error) {
	path := dir.Name() + "/" + name
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("failed to open log %s: %w", path, ErrNotRegular)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("failed to open log %s: %w", path, err)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENXIO), errors.Is(err, unix.EISDIR):
		// A symlink, a FIFO without a reader or a socket, a directory: all
		// planted after the Fstatat above.
		return nil, fmt.Errorf("failed to open log %s: %w", path, ErrNotRegular)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("failed to stat log %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("failed to open log %s: %w", path, ErrNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("failed to open log %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// removeAt removes name from dir without following it: a file, a symlink, a
// FIFO or an empty directory.
func removeAt(dir *os.File, name string) error {
	err := unix.Unlinkat(int(dir.Fd()), name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: dir.Name() + "/" + name, Err: err}
	}
	return nil
}

// listIndexesAt returns the indexes of the regular files "<prefix><n>" in
// dir, sorted ascending. Anything else at such a name is ignored.
// maxLogIndex bounds the index of a log file taken for one: a rotation a
// millisecond for a century stays below it, and continuing from a planted
// larger one would overflow.
const maxLogIndex = 1 << 42

func listIndexesAt(dir *os.File, prefix string) ([]int, error) {
	// A fresh descriptor, so each listing starts at the directory's start.
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to list log directory %s: %w", dir.Name(), err)
	}
	d := os.NewFile(uintptr(fd), dir.Name())
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("failed to list log directory %s: %w", dir.Name(), err)
	}
	var idxs []int
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		n, err := strconv.Atoi(name[len(prefix):])
		if err != nil || n < 0 || n > maxLogIndex || name != prefix+strconv.Itoa(n) {
			continue // not a log file, or an index no rotation reaches (planted)
		}
		idxs = append(idxs, n)
	}
	sort.Ints(idxs)
	return idxs, nil
}
