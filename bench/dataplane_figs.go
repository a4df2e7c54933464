package bench

import (
	"context"
	"fmt"
	"path/filepath"
)

// httpFigures measures latency at a fixed rate (with the sidecars' and the
// app's CPU and memory during the mesh run) and the maximum rate, each the
// median of dataRounds interleaved direct/mesh pairs.
func (r *Runner) httpFigures(ctx context.Context, env *meshEnv) []*Figure {
	fo := Fortio{Bin: r.opts.Fortio, Netns: env.client, Dir: r.scratch}
	direct := fmt.Sprintf("http://%s:%d/", env.httpIP, appHTTP)
	mesh := fmt.Sprintf("http://127.0.0.1:%d/", upHTTP)
	base, got, usage, errB, errM, errU := r.fixedRateRounds(ctx, fo, env, direct, mesh)
	lat := []struct {
		name   string
		v, b   float64
		target *Target
		note   string
	}{
		{"HTTP latency p50 at 1,000 rps", got.P50, base.P50, &Target{Of: OfAdded, Op: "<=", Limit: 0.2}, ""},
		{"HTTP latency p90 at 1,000 rps", got.P90, base.P90, nil, "reference: Istio adds 1.7 ms at p90."},
		{"HTTP latency p99 at 1,000 rps", got.P99, base.P99, &Target{Of: OfAdded, Op: "<=", Limit: 1, Ref: "Istio: +2.7 ms"}, ""},
	}
	var figs []*Figure
	for _, l := range lat {
		if errM != nil || errB != nil {
			figs = append(figs, NotMeasured(l.name, "ms", reason(firstErr(errM, errB), ""), l.target))
			continue
		}
		f := Measured(l.name, "ms", l.v*1000, ptr(l.b*1000), l.target)
		f.Note = l.note
		if l.target != nil && l.target.Of == OfAdded {
			f.Note = fmt.Sprintf("added %.3f ms. %s", (l.v-l.b)*1000, l.note)
		}
		figs = append(figs, f)
	}
	if errM == nil && got.ActualQPS < 0.95*fixedRate {
		figs[0].Note += fmt.Sprintf(" The mesh runs held only %.0f rps.", got.ActualQPS)
	}
	figs = append(figs, sidecarFigures(usage, errU, errM)...)
	return append(figs, r.maxRateFigure(ctx, fo, direct, mesh))
}

// fixedRateRounds runs the fixed-rate load straight to the app and through
// the mesh, dataRounds times in turn, watching the mesh processes during
// each mesh run, and returns the medians.
func (r *Runner) fixedRateRounds(ctx context.Context, fo Fortio, env *meshEnv, direct, mesh string) (
	base, got FortioResult, usage map[string]sidecarUsage, errB, errM, errU error) {
	var bs, gs []FortioResult
	var us []map[string]sidecarUsage
	for i := 0; i < dataRounds && errB == nil && errM == nil; i++ {
		fixed := LoadSpec{QPS: fixedRate, Conns: fixedConns, Duration: fixedDuration, KeepAlive: true, URL: direct}
		b, err := fo.Run(ctx, fixed)
		if errB = err; err != nil {
			break
		}
		fixed.URL = mesh
		var g FortioResult
		u, err := watch(r.meshProcs(env), func() error { g, errM = fo.Run(ctx, fixed); return errM })
		if err != nil && errM == nil {
			// No process to watch: measure latency anyway.
			errU = err
			g, errM = fo.Run(ctx, fixed)
		}
		bs, gs = append(bs, b), append(gs, g)
		if u != nil {
			us = append(us, u)
		}
	}
	if errU == nil && len(us) < len(gs) {
		errU = ErrNoProcess
	}
	return medianFortio(bs), medianFortio(gs), medianUsage(us), errB, errM, errU
}

// maxRateFigure is the highest rate fortio reaches at maxConns keep-alive
// connections, through the mesh against straight to the app.
func (r *Runner) maxRateFigure(ctx context.Context, fo Fortio, direct, mesh string) *Figure {
	name := fmt.Sprintf("HTTP max rps at %d connections", maxConns)
	t := &Target{Of: OfRatio, Op: ">=", Limit: 0.6}
	var bs, gs []float64
	for i := 0; i < dataRounds; i++ {
		mx := LoadSpec{QPS: 0, Conns: maxConns, Duration: maxDuration, KeepAlive: true, URL: direct}
		b, errB := fo.Run(ctx, mx)
		mx.URL = mesh
		g, errM := fo.Run(ctx, mx)
		if err := firstErr(errM, errB); err != nil {
			return NotMeasured(name, "1/s", err.Error(), t)
		}
		bs, gs = append(bs, b.ActualQPS), append(gs, g.ActualQPS)
	}
	f := Measured(name, "1/s", median(gs), ptr(median(bs)), t)
	f.Note = ratioRange(gs, bs)
	return f
}

// meshProcs finds the sidecars of the client and the HTTP server and the
// HTTP server app.
func (r *Runner) meshProcs(env *meshEnv) map[string]int {
	procs := map[string]int{}
	find := func(name, alloc string, match []string) {
		pids, err := FindProcInNetns(filepath.Join(NetnsDir, alloc), match, []string{"executor"})
		if err == nil {
			procs[name] = pids[0]
		} else {
			r.log.Warn("process not found", "process", name, "alloc_id", alloc, "error", err)
		}
	}
	find("client sidecar", env.client, []string{"connect"})
	find("server sidecar", env.srvHTTP, []string{"connect"})
	find("server app", env.srvHTTP, []string{"demo-app", "counting"})
	return procs
}

// sidecarFigures reports each sidecar's CPU and memory next to the server
// app's (the same executable doing the least work). The memory target is
// judged on PSS: VmRSS also counts every page of the shared meshlet
// executable the process has mapped, pages the agent, the executors, the
// apps and the other sidecars map too and that cost the node once; PSS
// charges each process its share of them. VmRSS and RssAnon are shown
// beside it.
func sidecarFigures(usage map[string]sidecarUsage, errU, errM error) []*Figure {
	cpuT := &Target{Op: "<=", Limit: 0.1, Ref: "Istio: 0.2"}
	memT := &Target{Op: "<=", Limit: 30, Ref: "Istio: 60"}
	app, hasApp := usage["server app"]
	var figs []*Figure
	for _, side := range []string{"client sidecar", "server sidecar"} {
		u, ok := usage[side]
		cpuName := side + " CPU per 1,000 rps (baseline: server app)"
		pssName := side + " memory (PSS) at 1,000 rps (baseline: server app)"
		rssName := side + " VmRSS at 1,000 rps, shared executable pages included (baseline: server app)"
		anonName := side + " private memory (RssAnon) at 1,000 rps (baseline: server app)"
		if !ok || u.err != nil || errM != nil {
			why := reason(firstErr(errM, errU, u.err), "process not found in its allocation's namespace")
			figs = append(figs, NotMeasured(cpuName, "vCPU", why, cpuT), NotMeasured(pssName, "MB", why, memT),
				NotMeasured(rssName, "MB", why, nil), NotMeasured(anonName, "MB", why, nil))
			continue
		}
		var bc, bp, bm, ba *float64
		if hasApp && app.err == nil {
			bc, bp, bm, ba = ptr(app.vcpu), ptr(app.pss), ptr(app.mb), ptr(app.anon)
		}
		pss := Measured(pssName, "MB", u.pss, bp, memT)
		pss.Note = fmt.Sprintf("VmRSS is %.1f MB, of which %.1f MB are pages of the meshlet executable shared with the "+
			"node's other meshlet processes (agent, executors, apps, sidecars); PSS counts this process's share of them.",
			u.mb, u.mb-u.anon)
		cpu := Measured(cpuName, "vCPU", u.vcpu, bc, cpuT)
		cpu.Note = fmt.Sprintf("its busiest thread used %.0f %% of it. The sidecar has one P (GOMAXPROCS 1) and reads "+
			"and writes its sockets with raw system calls, so the runtime no longer hands that P to another thread during "+
			"a write; before that change 40-60 %% of its CPU ran on other threads.", 100*u.topThread)
		figs = append(figs, cpu, pss,
			Measured(rssName, "MB", u.mb, bm, nil), Measured(anonName, "MB", u.anon, ba, nil))
	}
	return figs
}

// connFigures measures new connections per second: one request per
// connection through the TCP (L4) service, so each costs the sidecars a
// TLS handshake and an authorization.
func (r *Runner) connFigures(ctx context.Context, env *meshEnv) []*Figure {
	fo := Fortio{Bin: r.opts.Fortio, Netns: env.client, Dir: r.scratch}
	spec := LoadSpec{QPS: 0, Conns: connConns, Duration: maxDuration, KeepAlive: false}
	spec.URL = fmt.Sprintf("http://%s:%d/", env.tcpIP, appTCP)
	base, errB := fo.Run(ctx, spec)
	spec.URL = fmt.Sprintf("http://127.0.0.1:%d/", upTCP)
	got, errM := fo.Run(ctx, spec)
	name := fmt.Sprintf("new connections per second (%d concurrent, TLS handshake + authz each)", connConns)
	if err := firstErr(errM, errB); err != nil {
		return []*Figure{NotMeasured(name, "1/s", err.Error(), nil)}
	}
	return []*Figure{Measured(name, "1/s", got.ActualQPS, ptr(base.ActualQPS), nil)}
}

// bulkFigures measures bulk TCP throughput with iperf3, the median of
// dataRounds interleaved direct/mesh pairs.
func (r *Runner) bulkFigures(ctx context.Context, env *meshEnv) *Figure {
	t := &Target{Of: OfRatio, Op: ">=", Limit: 0.5}
	name := "TCP bulk throughput (iperf3, 1 stream)"
	var bs, gs []float64
	for i := 0; i < dataRounds; i++ {
		base, errB := Iperf(ctx, r.opts.Iperf3, env.client, env.iperfIP, appIperf, bulkDuration)
		got, errM := Iperf(ctx, r.opts.Iperf3, env.client, "127.0.0.1", upIperf, bulkDuration)
		if err := firstErr(errM, errB); err != nil {
			return NotMeasured(name, "Gbit/s", err.Error(), t)
		}
		bs, gs = append(bs, base/1e9), append(gs, got/1e9)
	}
	f := Measured(name, "Gbit/s", median(gs), ptr(median(bs)), t)
	f.Note = ratioRange(gs, bs)
	return f
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
