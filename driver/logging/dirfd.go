package logging

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/internal/nofollow"
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
var ErrNotRegular = nofollow.ErrNotRegular

// openRegular opens a log file: see nofollow.OpenRegular.
func openRegular(dir *os.File, name string, flags int) (*os.File, error) {
	return nofollow.OpenRegular(dir, name, flags)
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
