package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	cniutils "github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nsRecord marks a namespace this package created; GC only removes
// namespaces it has a record for.
type nsRecord struct {
	AllocID string    `json:"alloc_id"`
	Path    string    `json:"path"`
	Network string    `json:"network"`
	Created time.Time `json:"created"`
}

func (m *Manager) recordPath(allocID string) string {
	return filepath.Join(recordDir(m.cfg), allocID)
}

// writeRecord persists the marker of allocID's namespace (atomically: a
// crash or a full disk leaves the old record or none, never a torn one).
// It is written before the namespace is created, so a crash in between
// leaves something GC can find.
func (m *Manager) writeRecord(allocID, network string) error {
	if err := os.MkdirAll(recordDir(m.cfg), 0o700); err != nil {
		return fmt.Errorf("failed to create state dir: %w", err)
	}
	data, err := json.Marshal(nsRecord{AllocID: allocID, Path: m.NetNSPath(allocID), Network: network, Created: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("failed to marshal namespace record: %w", err)
	}
	if err := atomicfile.WriteFile(m.recordPath(allocID), data, 0o600); err != nil {
		return fmt.Errorf("failed to write namespace record: %w", err)
	}
	return nil
}

// ensureRecord writes allocID's record unless a valid one for the same
// namespace path is there already.
func (m *Manager) ensureRecord(allocID, network string) error {
	data, err := os.ReadFile(m.recordPath(allocID))
	var rec nsRecord
	if err == nil && json.Unmarshal(data, &rec) == nil && rec.AllocID == allocID && rec.Path == m.NetNSPath(allocID) {
		return nil
	}
	return m.writeRecord(allocID, network)
}

// legacyTempSuffix ends the temp files ("<id>.tmp") of older versions'
// record writes; current ones are atomicfile's.
const legacyTempSuffix = ".tmp"

// recordOf returns the allocation ID a file of the record dir belongs to:
// a record or a temp file left by an interrupted write.
func recordOf(name string) (id string, temp bool) {
	if id, ok := atomicfile.TempTarget(name); ok {
		return id, true
	}
	if id, ok := strings.CutSuffix(name, legacyTempSuffix); ok {
		return id, true
	}
	return name, false
}

// removeRecord removes allocID's record and any temp file of a write of
// it that did not finish.
func (m *Manager) removeRecord(allocID string) error {
	if err := os.Remove(m.recordPath(allocID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to remove namespace record: %w", err)
	}
	entries, err := os.ReadDir(recordDir(m.cfg))
	if err != nil {
		return nil // no dir: no temp files
	}
	var errs []error
	for _, e := range entries {
		if id, temp := recordOf(e.Name()); temp && id == allocID {
			if err := os.Remove(filepath.Join(recordDir(m.cfg), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("failed to remove namespace record temp file: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// records returns the alloc IDs that have a namespace record, or a temp
// file of one.
func (m *Manager) records() ([]string, error) {
	entries, err := os.ReadDir(recordDir(m.cfg))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read namespace records: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if id, _ := recordOf(e.Name()); e.Type().IsRegular() && cniutils.ValidateContainerID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// ensureSharedDir makes NetNSDir exist and be a shared mount point, as
// `ip netns add` does, so namespace mounts propagate into mount namespaces
// created later. Done once per Manager; needs hostMu.
func (m *Manager) ensureSharedDir() error {
	if m.mountShared {
		return nil
	}
	dir := m.cfg.NetNSDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create netns dir: %w", err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself, then share it.
		if err = unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("failed to make %s a shared mount: %w", dir, err)
	}
	m.mountShared = true
	return nil
}

// createNetNS creates a network namespace and bind-mounts it at path. The
// unshare runs on a dedicated, locked OS thread that is never unlocked, so
// the Go runtime discards the thread (now in the new namespace) when the
// goroutine ends and no other goroutine ever runs in it.
func createNetNS(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("failed to create namespace mount point: %w", err)
	}
	_ = f.Close()

	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see the function comment.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errCh <- fmt.Errorf("failed to unshare network namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errCh <- fmt.Errorf("failed to bind-mount network namespace: %w", err)
			return
		}
		errCh <- nil
	}()
	if err := <-errCh; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// removeNetNS unmounts and removes a namespace file. A missing file or a
// file that is not mounted is not an error.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("failed to unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to remove network namespace %s: %w", path, err)
	}
	return nil
}

// deleteLinks deletes every interface but loopback inside the namespace
// at path, so the host ends of veth pairs disappear now rather than when
// the kernel gets round to destroying the namespace. A missing namespace
// is not an error.
func deleteLinks(path string) error {
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		links, err := netlinksafe.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().Flags&net.FlagLoopback != 0 {
				continue
			}
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				return err
			}
		}
		return nil
	})
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	if err != nil && !errors.As(err, &notExist) && !errors.As(err, &notNS) {
		return fmt.Errorf("failed to delete interfaces in %s: %w", path, err)
	}
	return nil
}

// netNSExists reports whether path is a mounted network namespace.
func netNSExists(path string) bool {
	return ns.IsNSorErr(path) == nil
}

// hasAddress checks that interface name inside the namespace at path
// exists, is up and has the IPv4 address addr.
func hasAddress(path, name, addr string) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return fmt.Errorf("no interface %s: %w", name, err)
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("interface %s is down", name)
		}
		addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("failed to list the addresses of %s: %w", name, err)
		}
		for _, a := range addrs {
			if a.IP.String() == addr {
				return nil
			}
		}
		return fmt.Errorf("interface %s does not have address %s", name, addr)
	})
}
