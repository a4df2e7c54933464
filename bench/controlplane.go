package bench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

const fanoutBench = "BenchmarkFanout"

// fanoutSizes are the simulated proxy counts, with the p99 targets
// for one change ACKed by every affected proxy (0: no target).
var fanoutSizes = []struct {
	n      int
	p99Max float64
}{{100, 0}, {1000, 100}, {10000, 1000}}

func (r *Runner) controlPlane(ctx context.Context) *Area {
	a := &Area{
		Name: "Control plane",
		Intro: "N simulated proxies speak real ADS over gRPC on 127.0.0.1, each its own node ID with 3 upstreams. " +
			"Connect and ACK times come from xds.BenchmarkFanout, which runs the xDS server and the proxies in one process " +
			"(100 proxies per gRPC connection). \"ACK\" is the time from one endpoint change (an instance added) to every " +
			"affected proxy (30 %) having received it. \"Agent heap/RSS per connected proxy\" come from two processes " +
			"(bench/cmd/xdsload): the real control plane (controlplane.New: catalog, CA, intentions, ext_authz, xDS) with the " +
			"N proxies registered and compiled in one, the N proxies (one gRPC connection each, like sidecars) in the other; " +
			"the server's Go HeapInuse and /proc VmRSS are read before any proxy connects and once all have ACKed their " +
			"initial config (after GC, free pages returned to the OS), and the growth is divided by N. " +
			"**measured** = delta xDS (what the built-in proxy speaks), **baseline** = state-of-the-world, same N, same run. " +
			"Authorization runs in process (authz.BenchmarkAuthorize, 1,000 intentions) and over gRPC on loopback " +
			"(authz.BenchmarkCheckGRPC).",
	}
	a.Figures = append(a.Figures, r.fanout(ctx, a)...)
	a.Figures = append(a.Figures, r.intentionFigures(ctx)...)
	a.Figures = append(a.Figures, r.authz(ctx, a)...)
	return a
}

// fanout runs BenchmarkFanout (in process: connect and ACK times) and the
// out-of-process agent memory measurement for every size and mode.
func (r *Runner) fanout(ctx context.Context, a *Area) []*Figure {
	res, err := r.goBench(ctx, GoBenchRun{
		Pkg: "./xds/", Bench: "^" + fanoutBench + "$", BenchTime: "20x",
		Env: []string{"MESHLET_BENCH_LARGE=1"}, Timeout: 8 * time.Minute,
	})
	mem, memErrs := r.fanoutMemory(ctx)
	if f := memFinding(mem); f != "" {
		a.Findings = append(a.Findings, f)
	}
	var figs []*Figure
	for _, s := range fanoutSizes {
		delta, okD := Find(res, fmt.Sprintf("%s/delta/proxies=%d", fanoutBench, s.n))
		sotw, okS := Find(res, fmt.Sprintf("%s/sotw/proxies=%d", fanoutBench, s.n))
		get := func(b GoBench, ok bool, unit string) *float64 {
			if v, has := b.Metrics[unit]; ok && has {
				return ptr(v)
			}
			return nil
		}
		var p99T *Target
		if s.p99Max > 0 {
			p99T = &Target{Of: OfBoth, Op: "<=", Limit: s.p99Max}
		}
		for _, m := range []struct {
			name, unit, metric string
			target             *Target
		}{
			{"connect all proxies", "ms", "connect_ms", nil},
			{"endpoint change ACKed, p50", "ms", "p50_ms", nil},
			{"endpoint change ACKed, p99", "ms", "p99_ms", p99T},
		} {
			name := fmt.Sprintf("N=%d: %s", s.n, m.name)
			v := get(delta, okD, m.metric)
			if v == nil {
				figs = append(figs, NotMeasured(name, m.unit, reason(err, "no result for N=%d", s.n), m.target))
				continue
			}
			f := Measured(name, m.unit, *v, get(sotw, okS, m.metric), m.target)
			figs = append(figs, f)
		}
	}
	if anyMissed(figs) {
		a.Findings = append(a.Findings, r.profile(ctx, "xDS fan-out (delta, N=1,000)", GoBenchRun{
			Pkg: "./xds/", Bench: "^" + fanoutBench + "$/delta/proxies=1000$", BenchTime: "20x", Timeout: 3 * time.Minute,
		}))
	}
	return withMemory(figs, mem, memErrs)
}

// withMemory inserts each size's agent memory figures after its
// in-process figures.
func withMemory(figs []*Figure, mem map[string]FanoutMemory, errs map[string]error) []*Figure {
	var out []*Figure
	for _, s := range fanoutSizes {
		prefix := fmt.Sprintf("N=%d: ", s.n)
		for _, f := range figs {
			if strings.HasPrefix(f.Name, prefix) {
				out = append(out, f)
			}
		}
		out = append(out, memFigures(s.n, mem, errs)...)
	}
	return out
}

// authz runs the authorization benchmarks.
func (r *Runner) authz(ctx context.Context, a *Area) []*Figure {
	res, err := r.goBench(ctx, GoBenchRun{Pkg: "./authz/", Bench: "^Benchmark(Authorize|CheckGRPC)$", BenchTime: "1s", Timeout: 3 * time.Minute})
	in, okIn := Find(res, "BenchmarkAuthorize")
	rpc, okRPC := Find(res, "BenchmarkCheckGRPC")
	var figs []*Figure
	if okIn {
		figs = append(figs,
			Measured("in-process decisions per second", "1/s", in.Metrics["decisions/s"], nil, nil),
			Measured("in-process decision p99", "µs", in.Metrics["p99-µs"], nil, &Target{Op: "<=", Limit: 50}))
	} else {
		figs = append(figs,
			NotMeasured("in-process decisions per second", "1/s", reason(err, "BenchmarkAuthorize reported nothing"), nil),
			NotMeasured("in-process decision p99", "µs", reason(err, "BenchmarkAuthorize reported nothing"), &Target{Op: "<=", Limit: 50}))
	}
	if okRPC && okIn {
		f := Measured("ext_authz Check over gRPC, p99 (baseline: in process)", "µs", rpc.Metrics["p99-µs"], ptr(in.Metrics["p99-µs"]), nil)
		f.Note = "what a sidecar pays per new inbound connection, loopback gRPC included."
		figs = append(figs, f,
			Measured("ext_authz Check over gRPC per second (baseline: in process)", "1/s", rpc.Metrics["decisions/s"], ptr(in.Metrics["decisions/s"]), nil))
	} else {
		figs = append(figs, NotMeasured("ext_authz Check over gRPC, p99", "µs", reason(err, "BenchmarkCheckGRPC reported nothing"), nil))
	}
	if anyMissed(figs) {
		a.Findings = append(a.Findings, r.profile(ctx, "in-process authorization", GoBenchRun{Pkg: "./authz/", Bench: "^BenchmarkAuthorize$", BenchTime: "1s", Timeout: 2 * time.Minute}))
	}
	return figs
}

// reason is err's text, or the formatted fallback when err is nil.
func reason(err error, format string, args ...any) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf(format, args...)
}

func anyMissed(figs []*Figure) bool {
	for _, f := range figs {
		if f.Met != nil && !*f.Met {
			return true
		}
	}
	return false
}
