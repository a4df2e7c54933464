package bench

import (
	"errors"
	"fmt"
)

// Names of the gateway area's figures.
var (
	gwP50Name = "HTTP latency p50 at 1,000 rps through the ingress gateway (baseline: direct)"
	gwP99Name = "HTTP latency p99 at 1,000 rps through the ingress gateway (baseline: direct)"
	gwMaxName = fmt.Sprintf("HTTP max rps at %d connections through the ingress gateway (baseline: direct)", maxConns)
)

// gatewayFigures are the gateway path against the direct one: p50 and
// p99 at the fixed rate (with the added milliseconds) and the max rate
// (with the ratio), each the median of the interleaved rounds. With err
// (the job never ran) or missing arms, every figure is not measured.
func gatewayFigures(direct, gw *armRuns, err error) []*Figure {
	if err == nil && (direct == nil || gw == nil) {
		err = errors.New("no round completed")
	}
	if err != nil {
		return []*Figure{NotMeasured(gwP50Name, "ms", err.Error(), nil), NotMeasured(gwP99Name, "ms", err.Error(), nil),
			NotMeasured(gwMaxName, "1/s", err.Error(), nil)}
	}
	figs := gatewayLatency(direct, gw)
	maxRPS := pairFigure(gwMaxName, "1/s", direct.maxRPS, gw.maxRPS, firstErr(gw.err("max rate"), direct.err("max rate")), nil)
	usage, errU := watchedUsage(gw)
	return append(append(figs, maxRPS), gatewayUsageFigures(usage, errU, gw.err("fixed rate"))...)
}

// gatewayUsageFigures are the gateway proxy's and the server sidecar's CPU
// and memory (PSS) during the gateway's fixed-rate runs, against the
// server app's (the same executable doing the least work).
func gatewayUsageFigures(usage map[string]sidecarUsage, errU, errF error) []*Figure {
	app, hasApp := usage[gwProcApp]
	var figs []*Figure
	for _, proc := range []string{gwProcGateway, gwProcSidecar} {
		cpuName := proc + " CPU per 1,000 rps through the gateway (baseline: server app)"
		pssName := proc + " memory (PSS) at 1,000 rps through the gateway (baseline: server app)"
		u, ok := usage[proc]
		if !ok || u.err != nil || errF != nil {
			why := reason(firstErr(errF, errU, u.err), "process not found in its allocation's namespace")
			figs = append(figs, NotMeasured(cpuName, "vCPU", why, nil), NotMeasured(pssName, "MB", why, nil))
			continue
		}
		var bc, bp *float64
		if hasApp && app.err == nil {
			bc, bp = ptr(app.vcpu), ptr(app.pss)
		}
		cpu := Measured(cpuName, "vCPU", u.vcpu, bc, nil)
		cpu.Note = fmt.Sprintf("%.0f µs of CPU per request; its busiest thread used %.0f %% of it.", u.vcpu/fixedRate*1e6, 100*u.topThread)
		pss := Measured(pssName, "MB", u.pss, bp, nil)
		if errU != nil {
			// Some round ran without its processes watched: the
			// median is of the others.
			partial := "Not watched in every round (" + errU.Error() + "): the median of the watched ones."
			cpu.Note += " " + partial
			pss.Note = partial
		}
		figs = append(figs, cpu, pss)
	}
	return figs
}

// gatewayLatency is p50 and p99 at the fixed rate.
func gatewayLatency(direct, gw *armRuns) []*Figure {
	errF := firstErr(gw.err("fixed rate"), direct.err("fixed rate"))
	if errF == nil && (len(gw.fixed) == 0 || len(direct.fixed) == 0) {
		errF = errors.New("no round completed")
	}
	if errF != nil {
		return []*Figure{NotMeasured(gwP50Name, "ms", errF.Error(), nil), NotMeasured(gwP99Name, "ms", errF.Error(), nil)}
	}
	base, got := medianFortio(direct.fixed), medianFortio(gw.fixed)
	var figs []*Figure
	for _, l := range []struct {
		name string
		pick func(FortioResult) float64
	}{
		{gwP50Name, func(r FortioResult) float64 { return r.P50 }},
		{gwP99Name, func(r FortioResult) float64 { return r.P99 }},
	} {
		v, b := l.pick(got)*1000, l.pick(base)*1000
		f := Measured(l.name, "ms", v, ptr(b), nil)
		f.Note = fmt.Sprintf("added %.3f ms. %s", v-b, ratioRange(series(gw.fixed, l.pick), series(direct.fixed, l.pick)))
		figs = append(figs, f)
	}
	if got.ActualQPS < 0.95*fixedRate {
		figs[0].Note += fmt.Sprintf(" The gateway runs held only %.0f rps.", got.ActualQPS)
	}
	return figs
}

// series is one field of every round's result.
func series(rs []FortioResult, pick func(FortioResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = pick(r)
	}
	return out
}
