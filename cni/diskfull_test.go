package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// smallTmpfs mounts a tmpfs of size bytes on a fresh temp dir. Call it
// before creating the test network that uses it: cleanups run last-in
// first-out, so it is unmounted after the network's cleanup.
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}

// fillTmpfs fills the tmpfs at dir until pages pages are free and returns
// the func that frees the space again.
func fillTmpfs(t *testing.T, dir string, pages int) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, pageSize)
	var size int64
	for {
		n, err := f.Write(chunk)
		size += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	size -= size % pageSize
	if err := f.Truncate(max(0, size-int64(pages*pageSize))); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("free %s: %v", dir, err)
		}
	}
}

// TestSetupOnFullDiskLeavesNothing: with the state dir full, or with a few
// pages left (enough for some of the record, lease and CNI cache writes
// but not all), a Setup that fails removes everything it created: once
// space is back nothing of it is left (namespace, record or its temp file,
// veth, lease, DNAT and firewall rules, cache).
func TestSetupOnFullDiskLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	state := smallTmpfs(t, 1<<20)
	tn := newTestNetIn(t, realPluginDir(t), 24, state)
	port := freePort(t)
	mapping := structs.PortMapping{Label: "http", Value: port, To: 8080}
	// A node that ran allocations before its disk filled up.
	warm := tn.alloc(mapping)
	tn.setup(warm)
	if err := tn.m.Teardown(t.Context(), warm); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for pages := 0; pages <= 6; pages++ {
		a := tn.alloc(mapping)
		free := fillTmpfs(t, state, pages)
		st, err := tn.m.Setup(t.Context(), a)
		free()
		t.Logf("%d free pages: Setup = %+v, %v", pages, st, err)
		switch {
		case err != nil:
			failed++
			if st != nil {
				t.Errorf("%d free pages: failed Setup returned a status %+v", pages, st)
			}
			if pages == 0 && !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("Setup on a full disk = %v; want an error wrapping ENOSPC", err)
			}
		default:
			if err := tn.m.Teardown(t.Context(), a); err != nil {
				t.Fatalf("Teardown: %v", err)
			}
		}
		if r := tn.residue(a.ID); len(r) > 0 {
			t.Fatalf("%d free pages, Setup error %v; left behind once space was back:\n  %s", pages, err, strings.Join(r, "\n  "))
		}
	}
	if failed == 0 {
		t.Fatal("no Setup failed: the state dir was never full")
	}
	// With space back, the next allocation gets the port.
	a := tn.alloc(mapping)
	tn.setup(a)
}

// TestRestoreOnFullDiskKeepsNetwork: an agent restarted on a full disk
// re-adopts a running allocation's network even though it cannot write the
// namespace record, whether the record is still there or was lost; its
// namespace, address and traffic survive, and the record is written again
// once there is space.
func TestRestoreOnFullDiskKeepsNetwork(t *testing.T) {
	testutil.RequireRoot(t)
	state := smallTmpfs(t, 1<<20)
	tn := newTestNetIn(t, realPluginDir(t), 24, state)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 8080})
	st := tn.setup(a)
	path := tn.m.NetNSPath(a.ID)
	inode := nsInode(t, path)
	l := listenIn(t, path, net.JoinHostPort(st.Address, "0"), "alive")
	alive := func(when string) {
		t.Helper()
		if nsInode(t, path) != inode {
			t.Fatalf("%s: the namespace was replaced", when)
		}
		if got, err := dialFrom("", l.Addr().String(), dialTimeout); err != nil || got != "alive" {
			t.Fatalf("%s: host -> allocation: %q, %v", when, got, err)
		}
	}
	free := fillTmpfs(t, state, 0)
	defer free()
	restore := func(when string, call func(*Manager, context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error)) {
		t.Helper()
		got, err := call(tn.newManager(), t.Context(), a)
		if err != nil || got == nil || got.Address != st.Address {
			t.Fatalf("%s on a full disk = %+v, %v; want the running network (%s) kept", when, got, err, st.Address)
		}
		alive(when)
	}
	restore("Restore with its record", (*Manager).Restore)
	restore("Setup of an existing namespace", (*Manager).Setup)
	if err := os.Remove(tn.m.recordPath(a.ID)); err != nil {
		t.Fatal(err)
	}
	fillTmpfs(t, state, 0) // the record's page too
	restore("Restore without its record", (*Manager).Restore)
	if _, err := os.Stat(tn.m.recordPath(a.ID)); err == nil {
		t.Fatal("a record was written on a full disk?")
	}
	free()
	restore("Restore with space back", (*Manager).Restore)
	if _, err := os.Stat(tn.m.recordPath(a.ID)); err != nil {
		t.Fatalf("record not written again once there was space: %v", err)
	}
}
