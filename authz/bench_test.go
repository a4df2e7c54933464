package authz

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// maxSamples bounds the latency samples kept for the p99.
const maxSamples = 1 << 20

type latencies []time.Duration

func (l *latencies) add(d time.Duration) {
	if len(*l) < maxSamples {
		*l = append(*l, d)
	}
}

// report adds decisions/s and p99 latency (µs) to the benchmark output.
func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	p99 := l[(len(l)*99)/100]
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
}

// seed adds n exact intentions plus wildcards, as a busy mesh would have.
func seed(b *testing.B, f *fixture, n int) {
	for i := 0; i < n; i++ {
		f.upsert(b, fmt.Sprintf("svc-%d", i), fmt.Sprintf("svc-%d", (i+1)%n), "allow")
	}
	f.upsert(b, "*", "svc-0", "deny")
	f.upsert(b, "svc-1", "*", "deny")
}

// BenchmarkAuthorize measures in-process decisions (identity parsing plus
// intention lookup) against 1,000 intentions.
func BenchmarkAuthorize(b *testing.B) {
	f := newFixture(b, false)
	seed(b, f, 1000)
	srcs, dsts := make([]string, 64), make([]string, 64)
	for i := range srcs {
		srcs[i] = f.ca.SpiffeID(fmt.Sprintf("svc-%d", i))
		dsts[i] = fmt.Sprintf("svc-%d", (i+1)%64)
	}
	lat := make(latencies, 0, min(b.N, maxSamples))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := f.svc.Authorize(srcs[i%len(srcs)], dsts[i%len(dsts)]); err != nil {
			b.Fatal(err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkCheckGRPC measures ext_authz Check round trips over a real gRPC
// connection on loopback, as a sidecar makes them per connection.
func BenchmarkCheckGRPC(b *testing.B) {
	f := newFixture(b, false)
	seed(b, f, 1000)
	reqs := make([]*authv3.CheckRequest, 64)
	for i := range reqs {
		reqs[i] = request(f.ca.SpiffeID(fmt.Sprintf("svc-%d", i)), f.ca.SpiffeID(fmt.Sprintf("svc-%d", (i+1)%64)))
	}
	ctx := context.Background()
	lat := make(latencies, 0, min(b.N, maxSamples))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := f.client.Check(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkAuthorizeDuringWrites measures decisions while another goroutine
// keeps writing intentions to disk (encode + fsync per write): decisions
// read a snapshot and never wait for the disk.
func BenchmarkAuthorizeDuringWrites(b *testing.B) {
	m, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ix, err := intention.New(b.TempDir(), false, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := &fixture{ca: m, ix: ix, svc: New(m, ix, hclog.NewNullLogger(), nil)}
	seed(b, f, 100)
	src, dst := m.SpiffeID("svc-3"), "svc-4"
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		actions := [2]string{"allow", "deny"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			in := intention.Intention{SourceName: "writer", DestinationName: "svc-0", Action: actions[i%2]}
			if _, err := ix.Upsert(in, true); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	lat := make(latencies, 0, min(b.N, maxSamples))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if d, err := f.svc.Authorize(src, dst); err != nil || !d.Allowed {
			b.Fatalf("Authorize = %+v, %v", d, err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	close(stop)
	<-done
	lat.report(b)
}
