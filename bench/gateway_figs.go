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
	return append(figs, maxRPS)
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
