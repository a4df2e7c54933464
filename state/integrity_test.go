package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/internal/boltsafe/boltsafetest"
	"github.com/meshlet/meshlet/structs"
)

// populated returns the path of a closed store holding jobs and allocations.
func populated(t *testing.T, allocs int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server", "state.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertJob(testJob("web", 0)); err != nil {
		t.Fatal(err)
	}
	var as []*structs.Allocation
	for i := 0; i < allocs; i++ {
		as = append(as, &structs.Allocation{ID: fmt.Sprintf("alloc-%04d", i), JobID: "web", NodeID: "n1",
			Name: strings.Repeat("x", 200), DesiredStatus: structs.AllocDesiredStatusRun})
	}
	if _, err := s.UpsertAllocs(as); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFreshDirStartsAndRecordsCluster(t *testing.T) {
	s, path := openTest(t)
	raw, err := os.ReadFile(markerPath(path))
	if err != nil || s.ClusterID() == "" || !strings.Contains(string(raw), s.ClusterID()) {
		t.Fatalf("marker %q (%v) does not name cluster %q", raw, err, s.ClusterID())
	}
	id := s.ClusterID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.ClusterID() != id {
		t.Fatalf("cluster ID changed at reopen: %q → %q", id, s2.ClusterID())
	}
}

func TestLostStateIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   error
	}{
		{"deleted", func(t *testing.T, path string) { must(t, os.Remove(path)) }, ErrStateLost},
		{"truncated to empty", func(t *testing.T, path string) { must(t, os.Truncate(path, 0)) }, ErrStateLost},
		{"zeroed", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			must(t, err)
			must(t, os.WriteFile(path, make([]byte, fi.Size()), 0o600))
		}, ErrCorrupt},
		{"replaced by a new empty store", func(t *testing.T, path string) {
			must(t, os.Remove(path))
			db, err := bolt.Open(path, 0o600, nil)
			must(t, err)
			must(t, db.Close())
		}, ErrStateLost},
		{"marker unreadable", func(t *testing.T, path string) {
			must(t, os.WriteFile(markerPath(path), []byte("{"), 0o600))
		}, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := populated(t, 3)
			tc.damage(t, path)
			s, err := OpenBolt(path)
			if err == nil {
				_ = s.Close()
				t.Fatal("damaged state opened as a store")
			}
			msg := err.Error()
			if !errors.Is(err, tc.want) || !strings.Contains(msg, path) || strings.Contains(msg, "\n") {
				t.Fatalf("err = %q, want one line wrapping %v naming %s", msg, tc.want, path)
			}
			if !strings.Contains(msg, "restore") || !strings.Contains(msg, "marker") {
				t.Fatalf("err = %q does not say how to recover", msg)
			}
		})
	}
}

func TestRecoverByRemovingMarker(t *testing.T) {
	path := populated(t, 1)
	must(t, os.Remove(path))
	if _, err := OpenBolt(path); !errors.Is(err, ErrStateLost) {
		t.Fatalf("err = %v", err)
	}
	must(t, os.Remove(markerPath(path)))
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("after removing the marker: %v", err)
	}
	defer s.Close()
	if jobs, _ := s.Jobs(); len(jobs) != 0 {
		t.Fatalf("jobs = %v", jobs)
	}
}

// TestStoreWithoutMarkerGetsOne: a store written before markers existed
// (no cluster ID, no marker) keeps its data and is protected from then on.
func TestStoreWithoutMarkerGetsOne(t *testing.T) {
	path := populated(t, 1)
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyClusterID) }))
	must(t, db.Close())
	must(t, os.Remove(markerPath(path)))
	s, err := OpenBolt(path)
	must(t, err)
	if j, err := s.Job("web"); err != nil || j.ID != "web" {
		t.Fatalf("job = %v, %v", j, err)
	}
	must(t, s.Close())
	must(t, os.Remove(path))
	if _, err := OpenBolt(path); !errors.Is(err, ErrStateLost) {
		t.Fatalf("err = %v, want ErrStateLost", err)
	}
}

// TestRandomPageCorruption overwrites one page at a time with random bytes:
// opening and reading never panics, and damaged data pages are refused at
// open with ErrCorrupt.
func TestRandomPageCorruption(t *testing.T) {
	path := populated(t, 300)
	refused := boltsafetest.EachPageDamaged(t, path, 3, ErrCorrupt, func() error {
		s, err := OpenBolt(path)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.Allocs(); err != nil {
			return err
		}
		_, err = s.Jobs()
		return err
	})
	t.Logf("%d corrupted pages refused (the others were free pages)", refused)
}

func TestLockedByAnotherOpen(t *testing.T) {
	s, path := openTest(t)
	_ = s
	start := time.Now()
	_, err := OpenBoltOptions(path, Options{OpenTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrLocked naming %s", err, path)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("open did not honour its timeout")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMarkerElsewhere: with the marker outside the state dir, removing the
// whole dir is detected too.
func TestMarkerElsewhere(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "server", "state.db")
	opts := Options{MarkerPath: filepath.Join(root, "server-state.marker")}
	s, err := OpenBoltOptions(path, opts)
	must(t, err)
	must(t, s.Close())
	must(t, os.RemoveAll(filepath.Dir(path)))
	_, err = OpenBoltOptions(path, opts)
	if !errors.Is(err, ErrStateLost) || !strings.Contains(err.Error(), opts.MarkerPath) {
		t.Fatalf("err = %v, want ErrStateLost naming %s", err, opts.MarkerPath)
	}
}
