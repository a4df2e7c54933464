package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// devices are the host device nodes bound into the task's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are /dev's conventional symbolic links.
var devLinks = map[string]string{
	"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
	"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
}

// setupRoot builds the task's root in the calling process's (new, private)
// mount namespace and pivots into it. Every mount point is made inside
// RootDir without following a link the task may have left there, and all
// mounts stay in this namespace.
func setupRoot(c *Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("failed to make mounts private: %w", err)
	}
	root := filepath.Clean(c.RootDir)
	if err := bind(root, root, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return err
	}
	for _, b := range c.ReadOnly {
		if _, err := os.Stat(b.Source); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := bindRO(b.Source, root, b.Dest); err != nil {
			return err
		}
	}
	if c.AllocDir != "" {
		dst, err := mountpoint(root, "/alloc", true)
		if err != nil {
			return err
		}
		if err := bind(c.AllocDir, dst, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return err
		}
	}
	if err := setupProc(root); err != nil {
		return err
	}
	if err := setupDev(root); err != nil {
		return err
	}
	if err := setupTmp(root); err != nil {
		return err
	}
	return pivot(root)
}

// pivot makes root the process's "/" and detaches the old root.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("failed to enter the task root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("failed to pivot_root into %s: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("failed to detach the host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("failed to enter the new root: %w", err)
	}
	return nil
}

// mountpoint makes root+rel a directory (or, with dir false, an empty
// file), walking from root without following links: a link or a file of
// the wrong kind on the way is removed and replaced.
func mountpoint(root, rel string, dir bool) (string, error) {
	parts := strings.Split(strings.Trim(filepath.Clean("/"+rel), "/"), "/")
	p := root
	for i, name := range parts {
		p = filepath.Join(p, name)
		wantDir := dir || i < len(parts)-1
		fi, err := os.Lstat(p)
		if err == nil && fi.IsDir() == wantDir && fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if err == nil {
			if err := os.RemoveAll(p); err != nil {
				return "", fmt.Errorf("failed to replace %s: %w", p, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("failed to inspect %s: %w", p, err)
		}
		if wantDir {
			err = os.Mkdir(p, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return "", fmt.Errorf("failed to create mount point %s: %w", p, err)
		}
	}
	return p, nil
}

// bind bind-mounts src (with its submounts) at dst, then applies flags
// (MS_NOSUID, MS_NODEV, MS_RDONLY...) to the new mount.
func bind(src, dst string, flags uintptr) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("failed to bind %s at %s: %w", src, dst, err)
	}
	if flags == 0 {
		return nil
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
		return fmt.Errorf("failed to set flags on %s: %w", dst, err)
	}
	return nil
}

// bindRO binds the host's src read-only at root+rel: the mount and every
// submount (mount_setattr); on kernels without it only src itself is bound.
func bindRO(src, root, rel string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("failed to inspect %s: %w", src, err)
	}
	dst, err := mountpoint(root, rel, fi.IsDir())
	if err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("failed to bind %s at %s: %w", src, dst, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	err = unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("failed to make %s read-only: %w", dst, err)
	}
	if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("failed to unbind %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("failed to bind %s at %s: %w", src, dst, err)
	}
	return bind(dst, dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
}

// setupProc mounts a procfs for the task's PID namespace, with the
// kernel's knobs (/proc/sys, /proc/sysrq-trigger) read-only.
func setupProc(root string) error {
	dst, err := mountpoint(root, "/proc", true)
	if err != nil {
		return err
	}
	if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("failed to mount /proc: %w", err)
	}
	for _, p := range []string{"sys", "sysrq-trigger"} {
		path := filepath.Join(dst, p)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if err := bind(path, path, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// setupDev mounts a small tmpfs /dev holding the host's harmless device
// nodes (bound), /dev/shm, /dev/pts and the usual links, then makes it
// read-only.
func setupDev(root string) error {
	dst, err := mountpoint(root, "/dev", true)
	if err != nil {
		return err
	}
	const opts = "mode=755,size=64k"
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("failed to mount /dev: %w", err)
	}
	for _, d := range devices {
		src := "/dev/" + d
		if _, err := os.Stat(src); err != nil {
			continue
		}
		node := filepath.Join(dst, d)
		if err := os.WriteFile(node, nil, 0o644); err != nil {
			return fmt.Errorf("failed to create %s: %w", node, err)
		}
		if err := bind(src, node, 0); err != nil {
			return err
		}
	}
	for name, target := range devLinks {
		if err := os.Symlink(target, filepath.Join(dst, name)); err != nil {
			return fmt.Errorf("failed to create /dev/%s: %w", name, err)
		}
	}
	shm, pts := filepath.Join(dst, "shm"), filepath.Join(dst, "pts")
	for _, d := range []string{shm, pts} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("failed to create %s: %w", d, err)
		}
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("failed to mount /dev/shm: %w", err)
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("failed to mount /dev/pts: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("failed to make /dev read-only: %w", err)
	}
	return nil
}

// setupTmp mounts a tmpfs at /tmp unless the task dir has its own tmp/.
func setupTmp(root string) error {
	p := filepath.Join(root, "tmp")
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return nil
	}
	dst, err := mountpoint(root, "/tmp", true)
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("failed to mount /tmp: %w", err)
	}
	return nil
}

// taskDirs are the task directory's entries the task's user must own.
var taskDirs = []string{"", "local", "secrets", "tmp"}

// ChownTaskDir gives the task directory and its local/, secrets/ and tmp/
// (those that exist) to uid:gid, as the client does for a task's explicit
// user, so that a task running as the default user can use them. Links
// are never followed.
func ChownTaskDir(dir string, uid, gid int) error {
	for _, name := range taskDirs {
		p := filepath.Join(dir, name)
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && name != "" {
			continue
		}
		if err != nil {
			return fmt.Errorf("failed to open %s: %w", p, err)
		}
		err = unix.Fchown(fd, uid, gid)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("failed to give %s to uid %d: %w", p, uid, err)
		}
	}
	return nil
}
