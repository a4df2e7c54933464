package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// bareNetns times n creations and deletions of a bare network namespace
// (unshare + bind mount onto a file under dir, then unmount): the floor
// under any allocation network setup, used as the CNI figures' baseline.
func bareNetns(dir string, n int) (setups, teardowns []time.Duration, err error) {
	for i := 0; i < n; i++ {
		path := filepath.Join(dir, fmt.Sprintf("bench-netns-%d", i))
		start := time.Now()
		if err := createNetns(path); err != nil {
			return nil, nil, err
		}
		mid := time.Now()
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return nil, nil, fmt.Errorf("failed to unmount namespace: %w", err)
		}
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("failed to remove namespace file: %w", err)
		}
		setups = append(setups, mid.Sub(start))
		teardowns = append(teardowns, time.Since(mid))
	}
	return setups, teardowns, nil
}

// createNetns makes a new network namespace and bind-mounts it at path.
// The work runs on a locked OS thread that is never unlocked, so the Go
// runtime throws that thread (now in the new namespace) away.
func createNetns(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create namespace file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("failed to unshare network namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("failed to bind-mount namespace: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}
