package bench

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// l7Round is canned `go test -bench` output of one plain or routed run.
func l7Round(name string, nsOp, cpu float64) string {
	return fmt.Sprintf("goos: linux\ngoarch: amd64\npkg: github.com/meshlet/meshlet/sidecar\ncpu: AMD EPYC\n"+
		"%s-2   \t   20000\t     %.0f ns/op\t        %.2f cpu-µs/req\nPASS\nok  \tgithub.com/meshlet/meshlet/sidecar\t4.1s\n", name, nsOp, cpu)
}

func parseOne(t *testing.T, out, name string) GoBench {
	t.Helper()
	rs, problems := ParseGoBench(out)
	b, ok := Find(rs, name)
	if !ok || len(problems) != 0 {
		t.Fatalf("%s not parsed from %q (problems %v)", name, out, problems)
	}
	return b
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestL7ProxyFigures(t *testing.T) {
	plainCPU := []float64{100, 104, 96, 150, 101}   // one noisy round
	routedCPU := []float64{110, 112, 109, 115, 108} // median 110
	var s l7Samples
	for i := range plainCPU {
		s.plain = append(s.plain, parseOne(t, l7Round(l7PlainBench, 40000+float64(i), plainCPU[i]), l7PlainBench))
		s.routed = append(s.routed, parseOne(t, l7Round(l7RoutedBench, 44000, routedCPU[i]), l7RoutedBench))
	}
	figs := l7ProxyFigures(s, nil)
	if len(figs) != 2 {
		t.Fatalf("%d figures, want 2", len(figs))
	}
	cpu, wall := figs[0], figs[1]
	if *cpu.Value != 110 || *cpu.Baseline != 101 || !approx(*cpu.Ratio, 110.0/101) {
		t.Errorf("CPU figure %v / %v, want medians 110 / 101", *cpu.Value, *cpu.Baseline)
	}
	if cpu.Target == nil || cpu.Target.Of != OfRatio || cpu.Target.Limit != 1.25 || cpu.Met == nil || !*cpu.Met {
		t.Errorf("CPU target %+v met %v, want ratio ≤ 1.25 met", cpu.Target, deref(cpu.Met))
	}
	if !strings.Contains(cpu.Note, "Median of 5 interleaved runs; per-run ratios 0.767–1.14.") || !strings.Contains(cpu.Note, "20000 requests per run") {
		t.Errorf("CPU note %q", cpu.Note)
	}
	if *wall.Value != 44 || *wall.Baseline != 40.002 || wall.Target != nil {
		t.Errorf("wall figure %v / %v µs, want 44 / 40.002 without target", *wall.Value, *wall.Baseline)
	}

	// A routed run that costs 1.5× plain misses the target.
	slow := l7Samples{
		plain:  []GoBench{parseOne(t, l7Round(l7PlainBench, 1, 80), l7PlainBench)},
		routed: []GoBench{parseOne(t, l7Round(l7RoutedBench, 1, 120), l7RoutedBench)},
	}
	if f := l7ProxyFigures(slow, nil)[0]; f.Met == nil || *f.Met || *f.Ratio != 1.5 {
		t.Errorf("ratio 1.5: met %v ratio %v, want missed", deref(f.Met), deref(f.Ratio))
	}

	// A failed run leaves the target not measured, with go test's reason.
	failed := l7ProxyFigures(l7Samples{plain: s.plain[:2], routed: s.routed[:1]}, errors.New("failed to run ./sidecar/ benchmarks: GET: connection refused"))
	if failed[0].Value != nil || !strings.Contains(failed[0].NotMeasured, "connection refused") || failed[0].Target == nil {
		t.Errorf("failed run: %+v", failed[0])
	}
	// A metric the benchmark stopped reporting is not measured either.
	noCPU := l7Samples{plain: []GoBench{{Name: l7PlainBench, N: 1, Metrics: map[string]float64{"ns/op": 1}}}, routed: s.routed[:1]}
	if f := l7ProxyFigures(noCPU, nil)[0]; f.Value != nil || !strings.Contains(f.NotMeasured, l7CPUMetric) {
		t.Errorf("missing metric: %+v", f)
	}
}

const canned = `goos: linux
goarch: amd64
pkg: github.com/meshlet/meshlet/xds
cpu: AMD EPYC
BenchmarkCompileRoutes1000/hand-built-chains-2         	      10	 150000000 ns/op	   3400000 bytes/proxy	       610.0 route-bytes/service	       150.0 µs/service	90000000 B/op	  1100000 allocs/op
BenchmarkCompileRoutes1000/real-compile-2              	      10	 210000000 ns/op	   3500000 bytes/proxy	       640.0 route-bytes/service	       210.0 µs/service	120000000 B/op	  1500000 allocs/op
PASS
ok  	github.com/meshlet/meshlet/xds	12.3s
pkg: github.com/meshlet/meshlet/configentry
BenchmarkCompile1000-2   	      66	  18000000 ns/op
BenchmarkCheck1000-2     	     120	   9500000 ns/op
PASS
pkg: github.com/meshlet/meshlet/sidecar
BenchmarkRouteMatch-2    	 1000000	      1052 ns/op	     480 B/op	       9 allocs/op
PASS
`

func TestL7CompileFigures(t *testing.T) {
	rs, problems := ParseGoBench(canned)
	if len(problems) != 0 {
		t.Fatalf("problems %v", problems)
	}
	x := xdsRouteFigures(rs, nil)
	if len(x) != 3 {
		t.Fatalf("%d xDS figures, want 3", len(x))
	}
	if *x[0].Value != 210 || *x[0].Baseline != 150 || !approx(*x[0].Ratio, 1.4) || x[0].Unit != "ms" {
		t.Errorf("build figure %+v", x[0])
	}
	if !strings.Contains(x[0].Note, "210 µs per service; 1500000 allocations (120 MB) per build") || !strings.Contains(x[0].Note, "610 B of route configuration per service against 640") {
		t.Errorf("build note %q", x[0].Note)
	}
	if !approx(*x[1].Value, 3500000.0/1024) || x[1].Unit != "KiB" || *x[2].Value != 640 {
		t.Errorf("size figures %v KiB, %v B", *x[1].Value, *x[2].Value)
	}
	c := configEntryFigures(rs, nil)
	if *c[0].Value != 18 || !strings.Contains(c[0].Note, "18 µs per chain") || *c[1].Value != 9.5 {
		t.Errorf("configentry figures %v ms (%q), %v ms", *c[0].Value, c[0].Note, *c[1].Value)
	}
	m := routeMatchFigure(rs, nil)
	if *m.Value != 1052 || m.Note != "9 allocations (480 B) per request." {
		t.Errorf("route match %v ns, note %q", *m.Value, m.Note)
	}
}

func TestL7CompileSkipped(t *testing.T) {
	out := `pkg: github.com/meshlet/meshlet/xds
BenchmarkCompileRoutes1000/hand-built-chains-2  10  150000000 ns/op  3400000 bytes/proxy  610.0 route-bytes/service  150.0 µs/service
--- SKIP: BenchmarkCompileRoutes1000/real-compile
    bench_chain_test.go:98: configentry.Set.Compile is still the placeholder
PASS
`
	rs, problems := ParseGoBench(out)
	if len(problems) != 1 {
		t.Errorf("problems %v, want the skip", problems)
	}
	for _, f := range xdsRouteFigures(rs, nil) {
		if f.Value != nil || !strings.Contains(f.NotMeasured, "real-compile reported nothing") {
			t.Errorf("skipped real compile: %+v", f)
		}
	}
	for _, f := range configEntryFigures(nil, errors.New("failed to run ./configentry/ benchmarks: exit status 1")) {
		if f.Value != nil || !strings.Contains(f.NotMeasured, "exit status 1") {
			t.Errorf("failed configentry run: %+v", f)
		}
	}
	if f := routeMatchFigure(nil, nil); f.Value != nil || !strings.Contains(f.NotMeasured, l7MatchBench) {
		t.Errorf("no route match result: %+v", f)
	}
}

func TestL7Render(t *testing.T) {
	rs, _ := ParseGoBench(canned)
	s := l7Samples{
		plain:  []GoBench{parseOne(t, l7Round(l7PlainBench, 40000, 100), l7PlainBench)},
		routed: []GoBench{parseOne(t, l7Round(l7RoutedBench, 44000, 112), l7RoutedBench)},
	}
	a := &Area{Name: "L7 routing (built-in proxy)", Key: "l7"}
	a.Figures = append(l7ProxyFigures(s, nil), routeMatchFigure(rs, nil))
	a.Figures = append(a.Figures, xdsRouteFigures(rs, nil)...)
	md := Render(&Report{Areas: []*Area{a}})
	for _, want := range []string{
		"1 of 1 measured targets met.",
		"| CPU per request, 5-route router + 2-way split (baseline: plain forwarding) (µs) ¹ | 112 | 100 | 1.12× | ratio ≤ 1.25 | yes |",
		"| router alone: match 5 routes + pick the split (ns) ¹ | 1052 | — | — |  | — |",
		"| xDS build of one proxy with 1,000 routed upstreams (baseline: hand-built chains) (ms) ¹ | 210 | 150 | 1.4× |  | — |",
		"| xDS resources of that proxy (listeners, clusters, routes) (KiB) ¹ | 3418 | — | — |  | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("RESULTS.md lacks %q\n%s", want, md)
		}
	}
}

func TestMedianResult(t *testing.T) {
	out := `BenchmarkCompile1000-2  66  18000000 ns/op
BenchmarkCheck1000-2  120  9500000 ns/op
BenchmarkCompile1000-2  60  30000000 ns/op
BenchmarkCompile1000-2  70  20000000 ns/op
`
	rs, _ := ParseGoBench(out)
	b, ok := medianResult(rs, l7CompileBench)
	if !ok || b.Metrics["ns/op"] != 20000000 {
		t.Errorf("median of three runs = %v, want 20 ms", b.Metrics)
	}
	if f := configEntryFigures(rs, nil); *f[0].Value != 20 || *f[1].Value != 9.5 {
		t.Errorf("figures %v, %v", *f[0].Value, *f[1].Value)
	}
	if _, ok := medianResult(rs, "BenchmarkNone"); ok {
		t.Error("median of nothing")
	}
}
