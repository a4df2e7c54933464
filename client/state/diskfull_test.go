package state

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestFirstOpenOnFullDiskLeavesNothing: a first start whose state file
// cannot be initialised (a full disk) leaves no empty or torn state.db
// behind, so the next start, with space again, creates the state instead
// of refusing it as lost or corrupt.
func TestFirstOpenOnFullDiskLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8192"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	path := filepath.Join(dir, "client", "state.db")
	if db, err := Open(path); err == nil {
		_ = db.Close()
		t.Fatal("Open on a two-page tmpfs succeeded, want ENOSPC")
	}
	if left, _ := os.ReadDir(filepath.Dir(path)); len(left) != 0 {
		t.Fatalf("a failed first open left %v", left)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=1m"); err != nil {
		t.Fatalf("remount: %v", err)
	}
	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open with space again: %v", err)
	}
	defer db.Close()
	if err := db.PutNodeID("n1"); err != nil {
		t.Fatal(err)
	}
}
