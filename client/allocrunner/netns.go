package allocrunner

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotNetNS: the path is not a mounted network namespace.
var ErrNotNetNS = errors.New("not a mounted network namespace")

// NetNSInode returns the inode of the network namespace mounted at path
// (the inode /proc/<pid>/ns/net shows for a process inside it). A path
// that is missing, or is a plain file where the namespace's bind mount
// used to be, is ErrNotNetNS.
func NetNSInode(path string) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%s: %w", path, ErrNotNetNS)
		}
		return 0, fmt.Errorf("failed to stat %s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return 0, fmt.Errorf("%s: %w", path, ErrNotNetNS)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("failed to stat %s: %w", path, err)
	}
	return st.Ino, nil
}
