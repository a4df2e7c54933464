package bench

import (
	"fmt"
	"slices"
)

// dataRounds is how many interleaved baseline/mesh pairs each data-plane
// load figure is the median of: single runs on a shared 2-core machine
// vary by ±20 %, medians of interleaved pairs much less.
const dataRounds = 3

// dataPlaneRounds is the data-plane area's rounds (and the gateway
// area's): its four arms sit within a few per cent of each other while a
// single round's ratio swings by ±15 % on this machine, so the median is
// taken over five.
const dataPlaneRounds = 5

// median returns the middle value of xs (the mean of the two middle ones
// for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// medianFortio is the per-field median of fortio results.
func medianFortio(rs []FortioResult) FortioResult {
	pick := func(f func(FortioResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	return FortioResult{
		ActualQPS: pick(func(r FortioResult) float64 { return r.ActualQPS }),
		P50:       pick(func(r FortioResult) float64 { return r.P50 }),
		P90:       pick(func(r FortioResult) float64 { return r.P90 }),
		P99:       pick(func(r FortioResult) float64 { return r.P99 }),
		Avg:       pick(func(r FortioResult) float64 { return r.Avg }),
	}
}

// medianUsage is the per-process, per-field median of watched usage; a
// process with an error in any round keeps that error.
func medianUsage(rounds []map[string]sidecarUsage) map[string]sidecarUsage {
	out := map[string]sidecarUsage{}
	if len(rounds) == 0 {
		return out
	}
	for name := range rounds[0] {
		var cpu, mb, anon, pss, top, user, sys, sw []float64
		u := sidecarUsage{name: name}
		for _, r := range rounds {
			s, ok := r[name]
			if !ok || s.err != nil {
				u.err = fmt.Errorf("%s not measured in every round: %w", name, firstErr(s.err, ErrNoProcess))
				break
			}
			cpu, mb, anon, pss = append(cpu, s.vcpu), append(mb, s.mb), append(anon, s.anon), append(pss, s.pss)
			top, user, sys, sw = append(top, s.topThread), append(user, s.user), append(sys, s.sys), append(sw, s.switches)
		}
		if u.err == nil {
			u.vcpu, u.mb, u.anon, u.pss = median(cpu), median(mb), median(anon), median(pss)
			u.topThread, u.user, u.sys, u.switches = median(top), median(user), median(sys), median(sw)
		}
		out[name] = u
	}
	return out
}

// ratioRange describes the spread of per-round mesh/baseline ratios.
func ratioRange(mesh, base []float64) string {
	var rs []float64
	for i := range mesh {
		if i < len(base) && base[i] > 0 {
			rs = append(rs, mesh[i]/base[i])
		}
	}
	if len(rs) == 0 {
		return ""
	}
	return fmt.Sprintf("Median of %d interleaved runs; per-run ratios %.3g–%.3g.", len(rs), slices.Min(rs), slices.Max(rs))
}
