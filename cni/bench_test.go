package cni

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// BenchmarkSetupTeardown measures one allocation's bridge network setup
// (namespace, loopback, bridge, host-local, firewall, portmap with one
// port mapped for tcp and udp; iptables backends, masquerade by meshlet's
// per-network rules, ensured once before the first setup) and teardown,
// reporting p50/p99 of each in milliseconds.
func BenchmarkSetupTeardown(b *testing.B) {
	testutil.RequireRoot(b)
	tn := newTestNetWith(b, realPluginDir(b), 24).m
	port := freePort(b)
	var setups, teardowns []time.Duration
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		a := testAlloc("bridge", structs.PortMapping{Label: "http", Value: port, To: 8080})
		start := time.Now()
		if _, err := tn.Setup(ctx, a); err != nil {
			b.Fatalf("Setup: %v", err)
		}
		mid := time.Now()
		if err := tn.Teardown(ctx, a); err != nil {
			b.Fatalf("Teardown: %v", err)
		}
		setups = append(setups, mid.Sub(start))
		teardowns = append(teardowns, time.Since(mid))
	}
	b.StopTimer()
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		pct := func(p float64) float64 {
			return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Millisecond)
		}
		b.ReportMetric(pct(0.50), name+"_p50_ms")
		b.ReportMetric(pct(0.99), name+"_p99_ms")
	}
	report("setup", setups)
	report("teardown", teardowns)
}

// concurrentAllocs is the allocation count of BenchmarkSetupConcurrent:
// the many-allocations figure of the bench's lifecycle area.
const concurrentAllocs = 100

// BenchmarkSetupConcurrent sets up concurrentAllocs bridge allocations at
// once, one goroutine each (as an agent does when that many allocations
// are placed on it), then tears them all down at once. It reports the time
// until all were set up and until all were torn down, and the p50/p99 of
// one setup under that load.
func BenchmarkSetupConcurrent(b *testing.B) {
	testutil.RequireRoot(b)
	m := newTestNetWith(b, realPluginDir(b), 24).m
	ctx := context.Background()
	var setups []time.Duration
	var allUp, allDown time.Duration
	loops := 0
	run := func(allocs []*structs.Allocation, op func(*structs.Allocation) error) time.Duration {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for _, a := range allocs {
			wg.Go(func() {
				t0 := time.Now()
				if err := op(a); err != nil {
					b.Errorf("%s: %v", a.ID, err)
				}
				mu.Lock()
				setups = append(setups, time.Since(t0))
				mu.Unlock()
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	for b.Loop() {
		allocs := make([]*structs.Allocation, concurrentAllocs)
		for i := range allocs {
			allocs[i] = testAlloc("bridge")
		}
		allUp += run(allocs, func(a *structs.Allocation) error { _, err := m.Setup(ctx, a); return err })
		n := len(setups)
		allDown += run(allocs, func(a *structs.Allocation) error { return m.Teardown(ctx, a) })
		setups = setups[:n] // keep the setups' latencies only
		loops++
		if b.Failed() {
			b.FailNow()
		}
	}
	b.StopTimer()
	slices.Sort(setups)
	pct := func(p float64) float64 {
		return float64(setups[int(p*float64(len(setups)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(allUp.Seconds()/float64(loops), "all_setup_s")
	b.ReportMetric(allDown.Seconds()/float64(loops), "all_teardown_s")
	b.ReportMetric(pct(0.50), "setup_p50_ms")
	b.ReportMetric(pct(0.99), "setup_p99_ms")
}
