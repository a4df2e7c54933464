package nofollow

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned when something other than a regular file (a
// symlink, a FIFO, a directory, a device...) sits at a name OpenRegular
// was asked to open.
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens name in the directory dir with flags (O_RDONLY, or
// O_WRONLY|O_APPEND with or without O_CREAT) and returns it only if it is
// a regular file. A symlink, FIFO, socket, device or directory at name
// yields ErrNotRegular, and is never opened for real: name is first opened
// as a path only (O_PATH, which runs no driver's open and never blocks),
// checked, and that very inode reopened; a missing file is created with
// O_EXCL, so it is the new regular file or nothing. The file is named
// dir.Name()/name.
func OpenRegular(dir *os.File, name string, flags int) (*os.File, error) {
	path := dir.Name() + "/" + name
	for try := 0; ; try++ {
		pfd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && flags&unix.O_CREAT != 0 {
			fd, cerr := unix.Openat(int(dir.Fd()), name, flags|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
			if errors.Is(cerr, unix.EEXIST) && try < 3 {
				continue // planted meanwhile: look again
			}
			if cerr != nil {
				return nil, &os.PathError{Op: "create", Path: path, Err: cerr}
			}
			return os.NewFile(uintptr(fd), path), nil
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return reopenRegular(pfd, path, flags&^unix.O_CREAT)
	}
}

// reopenRegular opens, with flags, the inode that the O_PATH descriptor
// pfd (closed here) refers to, if it is a regular file.
func reopenRegular(pfd int, path string, flags int) (*os.File, error) {
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
