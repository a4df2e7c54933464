package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// smallTmpfs mounts a tmpfs of size bytes on a temporary dir.
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a filler file until the filesystem is full, then frees
// headroom bytes of it.
func fillDisk(t *testing.T, dir string, headroom int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(max(n-headroom, 0)); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStopOnFullDiskIsAllOrNothing stops a job with less and less free
// space: each attempt either stores the whole stop (new version, stopped
// allocations, evaluation) or nothing of it, with an error that says the
// disk is full.
func TestStopOnFullDiskIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	mnt := smallTmpfs(t, 4<<20)
	var failed, succeeded int
	for headroom := int64(0); headroom <= 768<<10; headroom += 24 << 10 {
		dir := filepath.Join(mnt, fmt.Sprint("h", headroom))
		st, err := state.OpenBolt(filepath.Join(dir, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		closeStore := func() { once.Do(func() { _ = st.Close() }) }
		t.Cleanup(closeStore) // before the unmount
		s := startServer(t, st, Config{})
		j := testJob("web", "raw_exec", 3)
		j.Meta = map[string]string{"blob": strings.Repeat("x", 40<<10)} // versions span many pages
		if _, err := s.RegisterJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		before, _ := st.Job("web")
		evals, _ := st.Evals()
		filler := fillDisk(t, mnt, headroom)

		_, err = s.StopJob(ctx, "web", false)
		after, rerr := st.Job("web")
		if rerr != nil {
			t.Fatalf("headroom %d: reads fail after a failed write: %v", headroom, rerr)
		}
		allocs, _ := st.AllocsByJob("web")
		evalsAfter, _ := st.Evals()
		stopped := 0
		for _, a := range allocs {
			if a.DesiredStatus == structs.AllocDesiredStatusStop {
				stopped++
			}
		}
		switch {
		case err == nil:
			succeeded++
			if !after.Stop || after.Version != before.Version+1 || stopped != 3 || len(evalsAfter) != len(evals)+1 {
				t.Fatalf("headroom %d: partial stop stored: stop %v version %d stopped %d evals %d", headroom,
					after.Stop, after.Version, stopped, len(evalsAfter))
			}
		default:
			failed++
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "failed to apply plan for job web") {
				t.Fatalf("headroom %d: err = %v, want a clear ENOSPC error", headroom, err)
			}
			if after.Stop || after.Version != before.Version || after.ModifyIndex != before.ModifyIndex || stopped != 0 ||
				len(evalsAfter) != len(evals) {
				t.Fatalf("headroom %d: failed stop changed state: stop %v version %d stopped %d evals %d", headroom,
					after.Stop, after.Version, stopped, len(evalsAfter))
			}
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			// Space is back: the same stop succeeds.
			if _, err := s.StopJob(ctx, "web", false); err != nil {
				t.Fatalf("headroom %d: stop after freeing space: %v", headroom, err)
			}
		}
		s.Shutdown()
		closeStore()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if failed == 0 || succeeded == 0 {
		t.Fatalf("%d failed, %d fitted: the headroom range must cover both", failed, succeeded)
	}
	t.Logf("%d stops failed cleanly on a full disk, %d fitted", failed, succeeded)
}
