package bench

import (
	"errors"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	cases := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, c := range cases {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []float64{5, 1, 3}
	median(in)
	if in[0] != 5 {
		t.Errorf("median sorted its input: %v", in)
	}
}

func TestMedianFortioAndUsage(t *testing.T) {
	got := medianFortio([]FortioResult{
		{ActualQPS: 990, P50: 0.003, P90: 0.004, P99: 0.009},
		{ActualQPS: 1000, P50: 0.001, P90: 0.002, P99: 0.005},
		{ActualQPS: 995, P50: 0.002, P90: 0.008, P99: 0.001},
	})
	if got.ActualQPS != 995 || got.P50 != 0.002 || got.P90 != 0.004 || got.P99 != 0.005 {
		t.Errorf("medianFortio = %+v", got)
	}
	u := medianUsage([]map[string]sidecarUsage{
		{"a": {vcpu: 0.3, pss: 10}, "b": {vcpu: 1}},
		{"a": {vcpu: 0.1, pss: 30}, "b": {err: errors.New("gone")}},
		{"a": {vcpu: 0.2, pss: 20}, "b": {vcpu: 1}},
	})
	if a := u["a"]; a.err != nil || a.vcpu != 0.2 || a.pss != 20 {
		t.Errorf("usage a = %+v", a)
	}
	if b := u["b"]; b.err == nil || !strings.Contains(b.err.Error(), "gone") {
		t.Errorf("usage b = %+v, want the round's error", b)
	}
}

func TestRatioRange(t *testing.T) {
	got := ratioRange([]float64{2, 3, 1}, []float64{10, 10, 10})
	if got != "Median of 3 interleaved runs; per-run ratios 0.1–0.3." {
		t.Errorf("ratioRange = %q", got)
	}
	if got := ratioRange([]float64{1}, []float64{0}); got != "" {
		t.Errorf("ratioRange with a zero baseline = %q", got)
	}
}

func TestRotation(t *testing.T) {
	first := map[int]bool{}
	for round := 0; round < 4; round++ {
		order := rotation(4, round)
		if len(order) != 4 {
			t.Fatalf("round %d: %v", round, order)
		}
		seen := map[int]bool{}
		for _, k := range order {
			seen[k] = true
		}
		if len(seen) != 4 {
			t.Errorf("round %d runs an arm twice: %v", round, order)
		}
		first[order[0]] = true
	}
	if len(first) != 4 {
		t.Errorf("not every arm goes first in 4 rounds: %v", first)
	}
	if got := rotation(4, 1); got[0] != 1 || got[3] != 0 {
		t.Errorf("rotation(4, 1) = %v, want [1 2 3 0]", got)
	}
}

func TestParseLoadAvg(t *testing.T) {
	if v, err := parseLoadAvg("0.42 0.50 0.61 1/123 4567\n"); err != nil || v != 0.42 {
		t.Errorf("parseLoadAvg = %v, %v", v, err)
	}
	if _, err := parseLoadAvg(""); err == nil {
		t.Error("parseLoadAvg of nothing: no error")
	}
}

func TestWaitFinding(t *testing.T) {
	got := waitFinding(&dpRuns{waits: []string{"fixed rate: waited 3s, load 1.20 → 0.90 (quiet)", "bulk: waited 0s"}})
	if !strings.Contains(got, "fixed rate: waited 3s") || !strings.Contains(got, "; bulk: waited 0s") {
		t.Errorf("waitFinding = %q", got)
	}
}
