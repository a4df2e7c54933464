package bench

import (
	"fmt"
	"path/filepath"
)

// httpFigures are the latency at the fixed rate (with the sidecars' and
// the app's CPU and memory during the mesh runs) and the maximum rate,
// mesh against direct, each the median of the interleaved rounds.
func httpFigures(direct, mesh *armRuns) []*Figure {
	errB, errM := direct.err("fixed rate"), mesh.err("fixed rate")
	base, got := medianFortio(direct.fixed), medianFortio(mesh.fixed)
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
		if errM != nil || errB != nil || len(mesh.fixed) == 0 || len(direct.fixed) == 0 {
			figs = append(figs, NotMeasured(l.name, "ms", reason(firstErr(errM, errB), "no round completed"), l.target))
			continue
		}
		f := Measured(l.name, "ms", l.v*1000, ptr(l.b*1000), l.target)
		f.Note = l.note
		if l.target != nil && l.target.Of == OfAdded {
			f.Note = fmt.Sprintf("added %.3f ms. %s", (l.v-l.b)*1000, l.note)
		}
		figs = append(figs, f)
	}
	if errM == nil && len(mesh.fixed) > 0 && got.ActualQPS < 0.95*fixedRate {
		figs[0].Note += fmt.Sprintf(" The mesh runs held only %.0f rps.", got.ActualQPS)
	}
	usage, errU := watchedUsage(mesh)
	figs = append(figs, sidecarFigures(usage, errU, errM)...)
	return append(figs, pairFigure(fmt.Sprintf("HTTP max rps at %d connections", maxConns), "1/s",
		direct.maxRPS, mesh.maxRPS, firstErr(mesh.err("max rate"), direct.err("max rate")), &Target{Of: OfRatio, Op: ">=", Limit: 0.6}))
}

// pairFigure is the median of the mesh's rounds against the direct
// path's, with the spread of the per-round ratios.
func pairFigure(name, unit string, base, mesh []float64, err error, t *Target) *Figure {
	if err == nil && (len(mesh) == 0 || len(base) == 0) {
		err = fmt.Errorf("no round completed")
	}
	if err != nil {
		return NotMeasured(name, unit, err.Error(), t)
	}
	f := Measured(name, unit, median(mesh), ptr(median(base)), t)
	f.Note = ratioRange(mesh, base)
	return f
}

// meshProcs finds the processes to watch through the mesh: for HTTP the
// client's and the HTTP server's sidecars and the HTTP server app, for
// bulk the client's and the iperf3 server's sidecars.
func (r *Runner) meshProcs(env *meshEnv, kind string) map[string]int {
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
	if kind == loadBulk {
		find("server sidecar", env.srvIperf, []string{"connect"})
		return procs
	}
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

// connFigure is new connections per second: one request per connection
// through the TCP (L4) service, so each costs the sidecars a TLS
// handshake and an authorization.
func connFigure(direct, mesh *armRuns) *Figure {
	name := fmt.Sprintf("new connections per second (%d concurrent, TLS handshake + authz each)", connConns)
	return pairFigure(name, "1/s", direct.conns, mesh.conns, firstErr(mesh.err("new connections"), direct.err("new connections")), nil)
}

// bulkFigure is bulk TCP throughput with iperf3.
func bulkFigure(direct, mesh *armRuns) *Figure {
	return pairFigure("TCP bulk throughput (iperf3, 1 stream)", "Gbit/s", direct.gbps, mesh.gbps,
		firstErr(mesh.err("bulk"), direct.err("bulk")), &Target{Of: OfRatio, Op: ">=", Limit: 0.5})
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
