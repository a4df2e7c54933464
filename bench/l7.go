package bench

import (
	"context"
	"fmt"
	"time"
)

// The L7 area's Go benchmarks.
const (
	l7PlainBench   = "BenchmarkPlain"
	l7RoutedBench  = "BenchmarkRouted"
	l7MatchBench   = "BenchmarkRouteMatch"
	l7RoutesBench  = "BenchmarkCompileRoutes1000"
	l7RealCompile  = l7RoutesBench + "/real-compile"
	l7HandCompile  = l7RoutesBench + "/hand-built-chains"
	l7CompileBench = "BenchmarkCompile1000"
	l7CheckBench   = "BenchmarkCheck1000"
)

const (
	// l7Rounds is how many interleaved plain/routed pairs the per-request
	// figures are the median of (the order alternates from round to round).
	l7Rounds = 5
	// l7CompileRounds is how many runs the compile figures are the
	// median of.
	l7CompileRounds = 3
	// l7Requests is each plain or routed run's request count.
	l7Requests = "20000x"
	// l7RatioMax is the target: routed CPU per request at most
	// 1.25 times plain forwarding's.
	l7RatioMax = 1.25
	// l7CPUMetric is what benchL7 reports: the test process's user+system
	// CPU (getrusage) divided by the request count.
	l7CPUMetric = "cpu-µs/req"
)

// l7Samples are the per-round results of BenchmarkPlain and
// BenchmarkRouted, in round order.
type l7Samples struct {
	plain, routed []GoBench
}

func (r *Runner) l7(ctx context.Context) *Area {
	a := &Area{
		Name: "L7 routing (built-in proxy)",
		Intro: "sidecar.BenchmarkRouted sends keep-alive GETs (4×GOMAXPROCS concurrent) from a client through web's sidecar " +
			"and api's sidecar to two backends, web's routes being a 5-route router (header, path prefix, method regex, path " +
			"regex and query matches that the request fails) before a 50/50 split between two subsets; **baseline** = " +
			"sidecar.BenchmarkPlain, the same mesh with one catch-all route to one cluster (plain HTTP forwarding), run in " +
			"the same `make bench` run, interleaved. CPU per request is the whole test process's user+system CPU (getrusage: " +
			"client, apps and both sidecars) divided by the request count. sidecar.BenchmarkRouteMatch is the router alone " +
			"(match the 5 routes, pick the split). xds.BenchmarkCompileRoutes1000 builds the xDS resources of one proxy with " +
			"1,000 HTTP upstreams whose services each have a 5-route router, a 90/10 splitter and a 2-subset resolver " +
			"(config entries compiled by configentry, then translated); **baseline** = the same translation from hand-built " +
			"chains (no compile). configentry.BenchmarkCompile1000 compiles the chains of 1,000 services (router, splitter, " +
			"resolver, service-defaults each); BenchmarkCheck1000 is the validation of one entry write against them.",
	}
	s, err := r.l7Samples(ctx)
	a.Figures = append(a.Figures, l7ProxyFigures(s, err)...)
	if anyMissed(a.Figures) {
		a.Findings = append(a.Findings, r.profile(ctx, "routed proxying (BenchmarkRouted)", GoBenchRun{
			Pkg: "./sidecar/", Bench: "^" + l7RoutedBench + "$", BenchTime: l7Requests, Timeout: 3 * time.Minute,
		}))
	}
	m, errM := r.goBench(ctx, GoBenchRun{Pkg: "./sidecar/", Bench: "^" + l7MatchBench + "$", BenchTime: "1s", Timeout: 2 * time.Minute})
	a.Figures = append(a.Figures, routeMatchFigure(m, errM))
	var x, c []GoBench
	var errX, errC error
	for i := 0; i < l7CompileRounds && errX == nil && errC == nil; i++ {
		var rs []GoBench
		rs, errX = r.goBench(ctx, GoBenchRun{Pkg: "./xds/", Bench: "^" + l7RoutesBench + "$", BenchTime: "30x", Timeout: 5 * time.Minute})
		x = append(x, rs...)
		rs, errC = r.goBench(ctx, GoBenchRun{Pkg: "./configentry/", Bench: "^(" + l7CompileBench + "|" + l7CheckBench + ")$",
			BenchTime: "1s", Timeout: 3 * time.Minute})
		c = append(c, rs...)
	}
	a.Figures = append(a.Figures, xdsRouteFigures(x, errX)...)
	a.Figures = append(a.Figures, configEntryFigures(c, errC)...)
	return a
}

// l7Samples runs BenchmarkPlain and BenchmarkRouted l7Rounds times each,
// one `go test` per run, alternating which goes first.
func (r *Runner) l7Samples(ctx context.Context) (l7Samples, error) {
	var s l7Samples
	for i := 0; i < l7Rounds; i++ {
		order := []string{l7PlainBench, l7RoutedBench}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, name := range order {
			res, err := r.goBench(ctx, GoBenchRun{Pkg: "./sidecar/", Bench: "^" + name + "$", BenchTime: l7Requests, Timeout: 3 * time.Minute})
			if err != nil {
				return s, err
			}
			b, ok := Find(res, name)
			if !ok {
				return s, fmt.Errorf("%w: %s", ErrNoBenchmark, name)
			}
			if name == l7PlainBench {
				s.plain = append(s.plain, b)
			} else {
				s.routed = append(s.routed, b)
			}
		}
	}
	return s, nil
}

// medianResult is the result named name whose every metric is the
// median of that metric over all of rs's results of that name (the lines
// of repeated runs); ok is false when there are none.
func medianResult(rs []GoBench, name string) (GoBench, bool) {
	var same []GoBench
	for _, r := range rs {
		if r.Name == name {
			same = append(same, r)
		}
	}
	if len(same) == 0 {
		return GoBench{}, false
	}
	out := GoBench{Name: name, Pkg: same[0].Pkg, N: same[0].N, Metrics: map[string]float64{}}
	for unit := range same[0].Metrics {
		if xs, ok := metricSeries(same, unit); ok {
			out.Metrics[unit] = median(xs)
		}
	}
	return out, true
}

// metricSeries is unit's value in every result; ok is false when one
// lacks it or there are none.
func metricSeries(rs []GoBench, unit string) ([]float64, bool) {
	out := make([]float64, 0, len(rs))
	for _, r := range rs {
		v, has := r.Metrics[unit]
		if !has {
			return nil, false
		}
		out = append(out, v)
	}
	return out, len(out) > 0
}

// l7ProxyFigures are the routed-against-plain figures: CPU per request
// (with the ratio target) and wall time per request, each the
// median of the rounds.
func l7ProxyFigures(s l7Samples, err error) []*Figure {
	const cpuName = "CPU per request, 5-route router + 2-way split (baseline: plain forwarding)"
	const wallName = "time per request, 4×GOMAXPROCS in flight (baseline: plain forwarding)"
	target := &Target{Of: OfRatio, Op: "<=", Limit: l7RatioMax}
	if err != nil || len(s.plain) == 0 || len(s.plain) != len(s.routed) {
		why := reason(err, "%d plain and %d routed results", len(s.plain), len(s.routed))
		return []*Figure{NotMeasured(cpuName, "µs", why, target), NotMeasured(wallName, "µs", why, nil)}
	}
	var figs []*Figure
	for _, m := range []struct {
		name, unit string
		scale      float64
		target     *Target
		note       string
	}{
		{cpuName, l7CPUMetric, 1, target, "user+system CPU of the whole test process (client, two apps, both sidecars) per request, " +
			"so the ratio understates the routing's share of the sidecar alone. "},
		{wallName, "ns/op", 1e-3, nil, "elapsed time divided by the request count (inverse throughput) on this machine. "},
	} {
		pv, okP := metricSeries(s.plain, m.unit)
		rv, okR := metricSeries(s.routed, m.unit)
		if !okP || !okR {
			figs = append(figs, NotMeasured(m.name, "µs", fmt.Sprintf("the benchmarks reported no %s", m.unit), m.target))
			continue
		}
		f := Measured(m.name, "µs", median(rv)*m.scale, ptr(median(pv)*m.scale), m.target)
		f.Note = m.note + ratioRange(rv, pv) + fmt.Sprintf(" %d requests per run.", s.routed[0].N)
		figs = append(figs, f)
	}
	return figs
}

// routeMatchFigure is BenchmarkRouteMatch: the router's own time per
// request, with its allocations in the note.
func routeMatchFigure(res []GoBench, err error) *Figure {
	const name = "router alone: match 5 routes + pick the split"
	b, ok := medianResult(res, l7MatchBench)
	v, has := b.Metrics["ns/op"]
	if !ok || !has {
		return NotMeasured(name, "ns", reason(err, "%s reported nothing", l7MatchBench), nil)
	}
	f := Measured(name, "ns", v, nil, nil)
	if allocs, has := b.Metrics["allocs/op"]; has {
		f.Note = fmt.Sprintf("%s allocations (%s B) per request.", fmtNum(allocs), fmtNum(b.Metrics["B/op"]))
	}
	return f
}

// xdsRouteFigures are BenchmarkCompileRoutes1000's: build time of one
// proxy with 1,000 routed upstreams against hand-built chains, and the
// size of what is served.
func xdsRouteFigures(res []GoBench, err error) []*Figure {
	const (
		buildName = "xDS build of one proxy with 1,000 routed upstreams (baseline: hand-built chains)"
		sizeName  = "xDS resources of that proxy (listeners, clusters, routes)"
		routeName = "route configuration per service"
	)
	rc, okR := medianResult(res, l7RealCompile)
	hand, okH := medianResult(res, l7HandCompile)
	if !okR {
		why := reason(err, "%s reported nothing (skipped?)", l7RealCompile)
		return []*Figure{NotMeasured(buildName, "ms", why, nil), NotMeasured(sizeName, "KiB", why, nil), NotMeasured(routeName, "B", why, nil)}
	}
	var base *float64
	if okH {
		base = ptr(hand.Metrics["ns/op"] / 1e6)
	}
	build := Measured(buildName, "ms", rc.Metrics["ns/op"]/1e6, base, nil)
	build.Note = fmt.Sprintf("median of %d runs; %s µs per service; %s allocations (%s MB) per build. The baseline skips "+
		"the compile but its hand-built routes are not the same (", l7CompileRounds, fmtNum(rc.Metrics["µs/service"]),
		fmtNum(rc.Metrics["allocs/op"]), fmtNum(rc.Metrics["B/op"]/1e6))
	if okH {
		build.Note += fmt.Sprintf("%s B of route configuration per service against %s), ", fmtNum(hand.Metrics["route-bytes/service"]),
			fmtNum(rc.Metrics["route-bytes/service"]))
	} else {
		build.Note += "and it reported nothing), "
	}
	build.Note += "so the ratio only bounds what compiling the config entries adds."
	size := Measured(sizeName, "KiB", rc.Metrics["bytes/proxy"]/1024, nil, nil)
	size.Note = "protobuf-marshalled size of every listener, cluster (2,001) and route configuration (1,000) the proxy is served."
	return []*Figure{build, size, Measured(routeName, "B", rc.Metrics["route-bytes/service"], nil, nil)}
}

// configEntryFigures are configentry's: compiling 1,000 services' chains
// and checking one write against them.
func configEntryFigures(res []GoBench, err error) []*Figure {
	const (
		compileName = "configentry: compile the chains of 1,000 services"
		checkName   = "configentry: check one entry write against 1,000 services"
	)
	var figs []*Figure
	if b, ok := medianResult(res, l7CompileBench); ok {
		f := Measured(compileName, "ms", b.Metrics["ns/op"]/1e6, nil, nil)
		f.Note = fmt.Sprintf("%s µs per chain.", fmtNum(b.Metrics["ns/op"]/1e3/1000))
		figs = append(figs, f)
	} else {
		figs = append(figs, NotMeasured(compileName, "ms", reason(err, "%s reported nothing", l7CompileBench), nil))
	}
	if b, ok := medianResult(res, l7CheckBench); ok {
		figs = append(figs, Measured(checkName, "ms", b.Metrics["ns/op"]/1e6, nil, nil))
	} else {
		figs = append(figs, NotMeasured(checkName, "ms", reason(err, "%s reported nothing", l7CheckBench), nil))
	}
	return figs
}
