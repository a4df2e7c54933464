package cni

import (
	"context"
	"slices"
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
