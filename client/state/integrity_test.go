package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/internal/boltsafe/boltsafetest"
	"github.com/meshlet/meshlet/structs"
)

// populated returns the path of a client state holding node n1 and n
// allocations, closed.
func populated(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client", "state.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.PutNodeID("n1"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a := &structs.Allocation{ID: fmt.Sprintf("alloc-%03d", i), Name: strings.Repeat("x", 200)}
		if err := db.PutAlloc(a); err != nil {
			t.Fatal(err)
		}
		if err := db.PutNetworkStatus(a.ID, &structs.AllocNetworkStatus{Address: "10.0.0.2"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantRefused checks that Open fails with want, in one line naming the
// file and saying how to recover.
func wantRefused(t *testing.T, path string, want error) {
	t.Helper()
	db, err := Open(path)
	if err == nil {
		_ = db.Close()
		t.Fatalf("Open succeeded, want %v", want)
	}
	msg := err.Error()
	if !errors.Is(err, want) || strings.Contains(msg, "\n") || !strings.Contains(msg, path) || !strings.Contains(msg, "restore") {
		t.Fatalf("err = %q, want a one-line %v naming %s and the recovery", msg, want, path)
	}
}

func TestLostClientStateIsRefused(t *testing.T) {
	tests := []struct {
		name string
		lose func(t *testing.T, path string)
	}{
		{"deleted", func(t *testing.T, path string) { must(t, os.Remove(path)) }},
		{"truncated to empty", func(t *testing.T, path string) { must(t, os.Truncate(path, 0)) }},
		{"replaced by an empty store", func(t *testing.T, path string) {
			must(t, os.Remove(path))
			db, err := bolt.Open(path, 0o600, nil)
			must(t, err)
			must(t, db.Close())
		}},
		{"another node's store", func(t *testing.T, path string) {
			other := populated(t, 0)
			db, err := Open(other)
			must(t, err)
			must(t, db.PutNodeID("n2"))
			must(t, db.Close())
			b, err := os.ReadFile(other)
			must(t, err)
			must(t, os.WriteFile(path, b, 0o600))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := populated(t, 3)
			tc.lose(t, path)
			wantRefused(t, path, ErrStateLost)
		})
	}
}

func TestEmptyStateFileWithoutMarkerIsRefused(t *testing.T) {
	path := populated(t, 1)
	must(t, os.Remove(MarkerPath(path)))
	must(t, os.Truncate(path, 0))
	wantRefused(t, path, ErrStateLost)
}

// TestStateWithoutMarkerGetsOne: state written before markers existed
// opens as before and gets its marker, so a later loss is detected.
func TestStateWithoutMarkerGetsOne(t *testing.T) {
	path := populated(t, 1)
	must(t, os.Remove(MarkerPath(path)))
	db, err := Open(path)
	must(t, err)
	if id, err := db.NodeID(); err != nil || id != "n1" {
		t.Fatalf("node id %q, %v", id, err)
	}
	must(t, db.Close())
	if _, err := os.Stat(MarkerPath(path)); err != nil {
		t.Fatalf("no marker written: %v", err)
	}
	must(t, os.Remove(path))
	wantRefused(t, path, ErrStateLost)
}

// TestCorruptClientStateIsRefused corrupts each page of a populated state
// in turn: Open (or a read) fails with ErrCorrupt, never a panic.
func TestCorruptClientStateIsRefused(t *testing.T) {
	path := populated(t, 200)
	boltsafetest.EachPageDamaged(t, path, 5, ErrCorrupt, func() error {
		db, err := Open(path)
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.Allocs()
		return err
	})
}

func TestLockedClientState(t *testing.T) {
	path := populated(t, 0)
	db, err := Open(path)
	must(t, err)
	defer db.Close()
	_, err = openDB(path, 50*time.Millisecond)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrLocked naming %s", err, path)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentNodeIDOfStateWithoutMarker: NodeID, which writes the
// missing marker, is safe for concurrent use as every method is.
func TestConcurrentNodeIDOfStateWithoutMarker(t *testing.T) {
	path := populated(t, 1)
	must(t, os.Remove(MarkerPath(path)))
	db, err := Open(path)
	must(t, err)
	defer db.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if id, err := db.NodeID(); err != nil || id != "n1" {
				t.Errorf("node id %q, %v", id, err)
			}
		})
	}
	wg.Wait()
	if _, err := os.Stat(MarkerPath(path)); err != nil {
		t.Fatalf("no marker written: %v", err)
	}
}

// TestTruncatedClientStateIsRefused: a state file cut short within its
// first two pages (a torn copy, a damaged disk) is ErrCorrupt with the
// recovery hint, as any other damage.
func TestTruncatedClientStateIsRefused(t *testing.T) {
	path := populated(t, 1)
	for _, size := range []int64{4096, 4096 + 100, 8191} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, path, ErrCorrupt)
	}
}
