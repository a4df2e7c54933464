package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The targets against the peers (item 2): per-round median ratios
// meshlet/peer, judged against the better peer (both rows must hold).
var (
	peerAtMost  = &Target{Of: OfRatio, Op: "<=", Limit: 1}
	peerAtLeast = &Target{Of: OfRatio, Op: ">=", Limit: 1}
	privateMB   = &Target{Op: "<=", Limit: 8}
)

// peerFigures are the rows "… vs <peer>": meshlet's median as the value,
// the peer's as the baseline, the median per-round ratio as the ratio. A
// missing arm (nil) or a failed block gives "not measured" rows with why.
func peerFigures(mesh, peer *armRuns, name string, why error) []*Figure {
	rows := []struct {
		name, unit string
		block      string
		pick       func(*armRuns) []float64
		t          *Target
	}{
		{"HTTP p50 at 1,000 rps", "ms", "fixed rate", fortioSeries(func(f FortioResult) float64 { return f.P50 * 1000 }), nil},
		{"HTTP p90 at 1,000 rps", "ms", "fixed rate", fortioSeries(func(f FortioResult) float64 { return f.P90 * 1000 }), peerAtMost},
		{"HTTP p99 at 1,000 rps", "ms", "fixed rate", fortioSeries(func(f FortioResult) float64 { return f.P99 * 1000 }), peerAtMost},
		{fmt.Sprintf("HTTP max rps at %d connections", maxConns), "1/s", "max rate", func(a *armRuns) []float64 { return a.maxRPS }, peerAtLeast},
		{"client sidecar CPU per request", "µs", "fixed rate", cpuPerRequest("client sidecar"), peerAtMost},
		{"server sidecar CPU per request", "µs", "fixed rate", cpuPerRequest("server sidecar"), peerAtMost},
		{"client sidecar private memory (RssAnon) at 1,000 rps", "MB", "fixed rate", usageSeries("client sidecar", anonOf), privateMB},
		{"server sidecar private memory (RssAnon) at 1,000 rps", "MB", "fixed rate", usageSeries("server sidecar", anonOf), privateMB},
		{"client sidecar PSS at 1,000 rps", "MB", "fixed rate", usageSeries("client sidecar", pssOf), peerAtMost},
		{"server sidecar PSS at 1,000 rps", "MB", "fixed rate", usageSeries("server sidecar", pssOf), peerAtMost},
		{"TCP bulk throughput (iperf3, 1 stream)", "Gbit/s", "bulk", func(a *armRuns) []float64 { return a.gbps }, peerAtLeast},
		{"CPU per Gbit/s, both sidecars", "vCPU per Gbit/s", "bulk", cpuPerGbit, peerAtMost},
		{fmt.Sprintf("new connections per second (%d concurrent)", connConns), "1/s", "new connections",
			func(a *armRuns) []float64 { return a.conns }, peerAtLeast},
	}
	var figs []*Figure
	for _, row := range rows {
		title := fmt.Sprintf("%s vs %s", row.name, name)
		err := why
		if err == nil && (mesh == nil || peer == nil) {
			err = errPeerDown
		}
		if err == nil {
			err = firstErr(mesh.err(row.block), peer.err(row.block))
		}
		if err != nil {
			figs = append(figs, NotMeasured(title, row.unit, err.Error(), row.t))
			continue
		}
		figs = append(figs, vsPeer(title, row.unit, row.pick(mesh), row.pick(peer), row.t))
	}
	annotatePeerRows(figs, mesh, peer)
	return figs
}

// vsPeer is one meshlet-vs-peer row from the per-round series.
func vsPeer(name, unit string, mesh, peer []float64, t *Target) *Figure {
	rs := roundRatios(mesh, peer)
	if len(rs) == 0 {
		return NotMeasured(name, unit, "no round measured both meshlet and the peer", t)
	}
	f := Measured(name, unit, median(mesh), ptr(median(peer)), nil)
	f.Target, f.Ratio = t, ptr(median(rs))
	switch {
	case t == nil:
	case t.Of == OfRatio:
		f.Met = ptr(t.holds(*f.Ratio))
	default:
		f.Met = ptr(t.holds(*f.Value))
	}
	f.Note = fmt.Sprintf("per-round ratios %s; meshlet %s, peer %s %s.", fmtRatios(rs), fmtRange(mesh), fmtRange(peer), unit)
	return f
}

// annotatePeerRows adds what some rows' targets need beyond the ratio:
// p99's round-to-round range must be no wider than the peer's, the private
// memory row compares with the peer's PSS, and new connections say
// meshlet's include an authorization.
func annotatePeerRows(figs []*Figure, mesh, peer *armRuns) {
	for _, f := range figs {
		switch {
		case f.Value == nil:
		case strings.HasPrefix(f.Name, "HTTP p99"):
			p99 := fortioSeries(func(r FortioResult) float64 { return r.P99 * 1000 })
			mw, pw := spread(p99(mesh)), spread(p99(peer))
			f.Note += fmt.Sprintf(" Round-to-round range: meshlet %.3f ms, peer %.3f ms (target: no wider).", mw, pw)
			f.Target = &Target{Of: OfRatio, Op: "<=", Limit: 1, Ref: "and range ≤ the peer's"}
			if f.Met != nil && mw > pw {
				f.Met = ptr(false)
			}
		case strings.Contains(f.Name, "RssAnon"):
			f.Note += " Target: ≤ 8 MB per sidecar; the peer's RssAnon is the baseline."
		case strings.HasPrefix(f.Name, "new connections"):
			f.Note += " Each meshlet connection includes the ext_authz check; the peers do none."
		case strings.HasPrefix(f.Name, "CPU per Gbit/s"):
			f.Note += " vCPU of both proxies during iperf3 divided by Gbit/s (≤ 1.0× is ≥ 1.0× Gbit/s per CPU)."
		}
	}
}

// roundRatios are mesh[i]/peer[i] for the rounds both measured.
func roundRatios(mesh, peer []float64) []float64 {
	var rs []float64
	for i := range min(len(mesh), len(peer)) {
		if peer[i] > 0 {
			rs = append(rs, mesh[i]/peer[i])
		}
	}
	return rs
}

func fmtRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.3g", r)
	}
	return strings.Join(parts, ", ")
}

// fmtRange is a series' lowest–highest value.
func fmtRange(xs []float64) string {
	return fmtNum(slices.Min(xs)) + "–" + fmtNum(slices.Max(xs))
}

// spread is max-min of a series (0 for none).
func spread(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs) - slices.Min(xs)
}

func fortioSeries(f func(FortioResult) float64) func(*armRuns) []float64 {
	return func(a *armRuns) []float64 {
		out := make([]float64, len(a.fixed))
		for i, r := range a.fixed {
			out[i] = f(r)
		}
		return out
	}
}

func anonOf(u sidecarUsage) float64 { return u.anon }
func pssOf(u sidecarUsage) float64  { return u.pss }

// usageSeries is one process's figure per fixed-rate round; nil when some
// round did not watch it.
func usageSeries(proc string, f func(sidecarUsage) float64) func(*armRuns) []float64 {
	return func(a *armRuns) []float64 {
		var out []float64
		for _, u := range a.usage {
			s, ok := u[proc]
			if !ok || s.err != nil {
				return nil
			}
			out = append(out, f(s))
		}
		return out
	}
}

// cpuPerRequest is one process's CPU time per request (µs) each round.
func cpuPerRequest(proc string) func(*armRuns) []float64 {
	vcpu := usageSeries(proc, func(u sidecarUsage) float64 { return u.vcpu })
	return func(a *armRuns) []float64 {
		v := vcpu(a)
		if len(v) != len(a.fixed) {
			return nil
		}
		out := make([]float64, len(v))
		for i := range v {
			if q := a.fixed[i].ActualQPS; q > 0 {
				out[i] = v[i] / q * 1e6
			}
		}
		return out
	}
}

// cpuPerGbit is the proxies' vCPU per Gbit/s each bulk round.
func cpuPerGbit(a *armRuns) []float64 {
	out := make([]float64, 0, len(a.gbps))
	for i := range min(len(a.gbps), len(a.bulkCPU)) {
		if a.gbps[i] > 0 {
			out = append(out, a.bulkCPU[i]/a.gbps[i])
		}
	}
	return out
}
