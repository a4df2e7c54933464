package bench

import (
	"errors"
	"strings"
	"testing"
)

// armWith is an arm's rounds: p99 in ms per round, and per-round figures
// scaled by k.
func armWith(p99 []float64, k float64, anon float64) *armRuns {
	a := &armRuns{errs: map[string]error{}}
	for i, p := range p99 {
		a.fixed = append(a.fixed, FortioResult{ActualQPS: 1000, P50: k * 0.0005, P90: k * 0.001, P99: p / 1000})
		a.usage = append(a.usage, map[string]sidecarUsage{
			"client sidecar": {vcpu: k * 0.05, anon: anon, pss: k * 10},
			"server sidecar": {vcpu: k * 0.04, anon: anon, pss: k * 10},
		})
		a.maxRPS = append(a.maxRPS, 10000/k+float64(i))
		a.conns = append(a.conns, 2000/k)
		a.gbps = append(a.gbps, 4/k)
		a.bulkCPU = append(a.bulkCPU, 1.0)
	}
	return a
}

func rowsByName(figs []*Figure) map[string]*Figure {
	m := map[string]*Figure{}
	for _, f := range figs {
		m[f.Name] = f
	}
	return m
}

func TestPeerFiguresVerdict(t *testing.T) {
	mesh := armWith([]float64{1.0, 1.1, 1.05}, 0.8, 6)
	peer := armWith([]float64{1.2, 1.5, 1.3}, 1, 3)
	figs := peerFigures(mesh, peer, "nginx", nil)
	if len(figs) != 13 {
		t.Fatalf("%d rows, want 13", len(figs))
	}
	rows := rowsByName(figs)
	for name, want := range map[string]bool{
		"HTTP p90 at 1,000 rps vs nginx":                                true,
		"HTTP p99 at 1,000 rps vs nginx":                                true,
		"HTTP max rps at 16 connections vs nginx":                       true,
		"client sidecar CPU per request vs nginx":                       true,
		"client sidecar private memory (RssAnon) at 1,000 rps vs nginx": true,
		"server sidecar PSS at 1,000 rps vs nginx":                      true,
		"TCP bulk throughput (iperf3, 1 stream) vs nginx":               true,
		"CPU per Gbit/s, both sidecars vs nginx":                        true,
		"new connections per second (8 concurrent) vs nginx":            true,
	} {
		f := rows[name]
		if f == nil || f.Met == nil || *f.Met != want {
			t.Errorf("%s: met %v, want %v (%+v)", name, deref(f.Met), want, f)
		}
	}
	if f := rows["HTTP p50 at 1,000 rps vs nginx"]; f.Met != nil || f.Ratio == nil || *f.Ratio != 0.8 {
		t.Errorf("p50 row: met %v ratio %v, want no target and 0.8", deref(f.Met), deref(f.Ratio))
	}
	if f := rows["CPU per Gbit/s, both sidecars vs nginx"]; f.Ratio == nil || *f.Ratio < 0.79 || *f.Ratio > 0.81 {
		t.Errorf("CPU per Gbit/s ratio %v, want 0.8", deref(f.Ratio))
	}
	if n := rows["new connections per second (8 concurrent) vs nginx"].Note; !strings.Contains(n, "ext_authz") {
		t.Errorf("new connections note %q does not mention ext_authz", n)
	}
}

func TestPeerFiguresMissed(t *testing.T) {
	// Faster at the median but a p99 range wider than the peer's, and
	// more private memory than 8 MB.
	mesh := armWith([]float64{0.5, 0.9, 2.0}, 1.2, 9)
	peer := armWith([]float64{1.2, 1.3, 1.25}, 1, 3)
	rows := rowsByName(peerFigures(mesh, peer, "HAProxy", nil))
	for _, name := range []string{
		"HTTP p99 at 1,000 rps vs HAProxy",
		"HTTP p90 at 1,000 rps vs HAProxy",
		"server sidecar CPU per request vs HAProxy",
		"server sidecar private memory (RssAnon) at 1,000 rps vs HAProxy",
		"HTTP max rps at 16 connections vs HAProxy",
	} {
		if f := rows[name]; f == nil || f.Met == nil || *f.Met {
			t.Errorf("%s: met %v, want missed", name, f)
		}
	}
	md := Render(&Report{Areas: []*Area{{Name: "Data plane", Figures: peerFigures(mesh, peer, "HAProxy", nil)}}})
	if !strings.Contains(md, "p99 at 1,000 rps vs HAProxy") || !strings.Contains(md, "**NO — missed**") {
		t.Errorf("rendered table lacks the peer rows or the missed verdict:\n%s", md)
	}
}

func TestPeerFiguresNotMeasured(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mesh, peer *armRuns
		why        error
		want       string
	}{
		{"peer down", armWith([]float64{1}, 1, 1), nil, nil, errPeerDown.Error()},
		{"given reason", nil, nil, errors.New("agent unavailable"), "agent unavailable"},
		{"block failed", armWith([]float64{1}, 1, 1), &armRuns{errs: map[string]error{"bulk": errors.New("iperf3 refused")}}, nil, "iperf3 refused"},
	} {
		rows := rowsByName(peerFigures(tc.mesh, tc.peer, "nginx", tc.why))
		f := rows["TCP bulk throughput (iperf3, 1 stream) vs nginx"]
		if f == nil || f.Value != nil || !strings.Contains(f.NotMeasured, tc.want) || f.Target == nil {
			t.Errorf("%s: %+v, want not measured with %q and its target", tc.name, f, tc.want)
		}
	}
}

func TestMeshFiguresFromArms(t *testing.T) {
	direct, mesh := armWith([]float64{0.5, 0.6, 0.7}, 0.5, 1), armWith([]float64{1, 2, 3}, 1, 6)
	rows := rowsByName(append(httpFigures(direct, mesh), connFigure(direct, mesh), bulkFigure(direct, mesh)))
	if f := rows["HTTP latency p99 at 1,000 rps"]; f == nil || f.Value == nil || *f.Value != 2 || *f.Baseline != 0.6 {
		t.Errorf("p99 row = %+v, want medians 2 and 0.6 ms", f)
	}
	if f := rows["TCP bulk throughput (iperf3, 1 stream)"]; f == nil || f.Ratio == nil || *f.Ratio != 0.5 {
		t.Errorf("bulk row = %+v, want ratio 0.5", f)
	}
	mesh.errs["max rate"] = errors.New("fortio failed")
	if f := rowsByName(httpFigures(direct, mesh))["HTTP max rps at 16 connections"]; f.Value != nil || !strings.Contains(f.NotMeasured, "fortio failed") {
		t.Errorf("max rps row with a failed block = %+v", f)
	}
	if n := rowsByName(peerFigures(mesh, direct, "nginx", nil))["HTTP p50 at 1,000 rps vs nginx"].Note; !strings.Contains(n, "meshlet 0.5–0.5, peer 0.25–0.25 ms") {
		t.Errorf("p50 vs peer note %q lacks the meshlet range", n)
	}
}
