package ca

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

func waitStats(t *testing.T, m *Manager, what string, want LeafStats) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, what, func() bool { return m.LeafStats() == want })
}

func mustHold(t *testing.T, m *Manager, service string) func() {
	t.Helper()
	release, err := m.HoldLeaf(service)
	if err != nil {
		t.Fatalf("HoldLeaf(%s): %v", service, err)
	}
	return release
}

// TestReleaseStopsRenewal: the last release of a held leaf drops the entry
// and its renewal goroutine; a later Leaf signs a new one.
func TestReleaseStopsRenewal(t *testing.T) {
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Limiter: lim})
	r1, r2 := mustHold(t, m, "web"), mustHold(t, m, "web")
	first := mustLeaf(t, m, "web")
	waitStats(t, m, "one held, renewing leaf", LeafStats{Cached: 1, Held: 1, Renewing: 1})
	r1()
	r1() // idempotent: must not drop r2's reference
	if st := m.LeafStats(); st != (LeafStats{Cached: 1, Held: 1, Renewing: 1}) {
		t.Fatalf("after one of two releases: %+v", st)
	}
	r2()
	waitStats(t, m, "released leaf and goroutine", LeafStats{})
	if second := mustLeaf(t, m, "web"); second.SerialNumber == first.SerialNumber || lim.calls.Load() != 2 {
		t.Fatalf("released leaf still cached (%d signings)", lim.calls.Load())
	}
	if _, err := m.HoldLeaf("not a name"); err == nil {
		t.Fatal("HoldLeaf accepted an invalid service name")
	}
}

// TestAPILeafCap: with MaxAPILeaves N, the N+1th API-only name evicts the
// least recently used one; held leaves do not count and are never evicted.
func TestAPILeafCap(t *testing.T) {
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Limiter: lim, MaxAPILeaves: 2})
	defer mustHold(t, m, "held")()
	mustLeaf(t, m, "held")
	mustLeaf(t, m, "a")
	mustLeaf(t, m, "b")
	mustLeaf(t, m, "a") // b is now the least recently used
	mustLeaf(t, m, "c")
	waitStats(t, m, "cap of 2 API leaves plus the held one", LeafStats{Cached: 3, Held: 1, Renewing: 3})
	before := lim.calls.Load()
	mustLeaf(t, m, "a")
	mustLeaf(t, m, "held")
	if lim.calls.Load() != before {
		t.Fatal("a recently used or held leaf was evicted")
	}
	mustLeaf(t, m, "b")
	if lim.calls.Load() != before+1 {
		t.Fatal("the evicted leaf was still cached")
	}
	if counterValue(t, m.metrics.evicted) != 2 {
		t.Fatalf("evictions = %v, want 2", counterValue(t, m.metrics.evicted))
	}
}

// TestIdleAPILeafExpires: an API-only leaf nobody asks for is released
// after LeafIdleTTL, with its goroutine; a held one stays.
func TestIdleAPILeafExpires(t *testing.T) {
	m := newTestManager(t, Config{LeafIdleTTL: 300 * time.Millisecond})
	defer mustHold(t, m, "held")()
	mustLeaf(t, m, "held")
	mustLeaf(t, m, "idle")
	waitStats(t, m, "idle API leaf released", LeafStats{Cached: 1, Held: 1, Renewing: 1})
}

// TestRotationSkipsReleasedLeaves: a rotation re-signs the cached leaves
// only, never one released before.
func TestRotationSkipsReleasedLeaves(t *testing.T) {
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Limiter: lim})
	release := mustHold(t, m, "gone")
	mustLeaf(t, m, "gone")
	mustLeaf(t, m, "kept")
	release()
	waitStats(t, m, "one leaf left", LeafStats{Cached: 1, Renewing: 1})
	var renewed sync.Map
	var kept atomic.Int32
	cancel := m.Subscribe(func(ev Event) {
		if ev.Kind == EventLeafRenewed {
			renewed.Store(ev.Service, true)
			if ev.Service == "kept" {
				kept.Add(1)
			}
		}
	})
	defer cancel()
	before := lim.calls.Load()
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "kept leaf re-signed", func() bool { return kept.Load() > 0 })
	if _, ok := renewed.Load("gone"); ok || lim.calls.Load() != before+1 {
		t.Fatalf("rotation re-signed a released leaf (%d signings, want 1)", lim.calls.Load()-before)
	}
}

// TestLeafCacheConcurrency shakes holds, releases, API calls, evictions
// and rotations together (run with -race); afterwards the counts agree.
func TestLeafCacheConcurrency(t *testing.T) {
	m := newTestManager(t, Config{MaxAPILeaves: 4, LeafIdleTTL: 50 * time.Millisecond, Limiter: &countingLimiter{}})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				svc := fmt.Sprintf("svc-%d", (w*7+i)%9)
				release, err := m.HoldLeaf(svc)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := m.Leaf(context.Background(), svc); err != nil {
					t.Error(err)
				}
				if _, err := m.Leaf(context.Background(), fmt.Sprintf("api-%d", i%11)); err != nil {
					t.Error(err)
				}
				release()
				if i%13 == 0 {
					if err := m.Rotate(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	waitStats(t, m, "every leaf released or expired", LeafStats{})
}
