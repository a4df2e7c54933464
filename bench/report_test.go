package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFigureTargets(t *testing.T) {
	tests := []struct {
		name     string
		value    float64
		baseline *float64
		target   *Target
		wantMet  *bool
		wantRate *float64
	}{
		{"value below limit", 2.6, nil, &Target{Op: "<=", Limit: 50}, ptr(true), nil},
		{"value above limit", 148, ptr(0.8), &Target{Op: "<=", Limit: 100}, ptr(false), ptr(185.0)},
		{"added latency within", 0.5, ptr(0.4), &Target{Of: OfAdded, Op: "<=", Limit: 0.2}, ptr(true), ptr(1.25)},
		{"added latency over", 0.9, ptr(0.4), &Target{Of: OfAdded, Op: "<=", Limit: 0.2}, ptr(false), ptr(2.25)},
		{"ratio met", 700, ptr(1000.0), &Target{Of: OfRatio, Op: ">=", Limit: 0.6}, ptr(true), ptr(0.7)},
		{"ratio missed", 500, ptr(1000.0), &Target{Of: OfRatio, Op: ">=", Limit: 0.6}, ptr(false), ptr(0.5)},
		{"ratio without baseline", 500, nil, &Target{Of: OfRatio, Op: ">=", Limit: 0.6}, nil, nil},
		{"both modes, baseline misses", 30, ptr(120.0), &Target{Of: OfBoth, Op: "<=", Limit: 100}, ptr(false), ptr(0.25)},
		{"both modes met", 30, ptr(90.0), &Target{Of: OfBoth, Op: "<=", Limit: 100}, ptr(true), nil},
		{"no target", 1, ptr(2.0), nil, nil, ptr(0.5)},
		{"zero baseline has no ratio", 1, ptr(0.0), nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Measured("x", "ms", tt.value, tt.baseline, tt.target)
			if (f.Met == nil) != (tt.wantMet == nil) || (f.Met != nil && *f.Met != *tt.wantMet) {
				t.Errorf("Met = %v, want %v", deref(f.Met), deref(tt.wantMet))
			}
			if tt.wantRate != nil && (f.Ratio == nil || *f.Ratio != *tt.wantRate) {
				t.Errorf("Ratio = %v, want %v", deref(f.Ratio), *tt.wantRate)
			}
			if tt.wantRate == nil && tt.name == "zero baseline has no ratio" && f.Ratio != nil {
				t.Errorf("Ratio = %v, want none", *f.Ratio)
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func sampleReport() *Report {
	return &Report{
		Machine:  Machine{Date: "2026-12-02 14:05 UTC", Cores: 2, CPUModel: "AMD EPYC", Kernel: "6.18", GoVersion: "go1.26.8", Commit: "abc1234", LoadGen: "fortio 1.63.0"},
		Duration: "5m0s",
		Areas: []*Area{{
			Name:  "Lifecycle",
			Intro: "intro text",
			Figures: []*Figure{
				Measured("setup p50", "ms", 148, ptr(0.84), &Target{Op: "<=", Limit: 100}),
				Measured("teardown | p50", "ms", 0.000123, nil, nil),
				NotMeasured("dashboard p50", "ms", "agent unavailable: exited\nduring start", &Target{Op: "<=", Limit: 1000}),
			},
			Findings: []string{"CNI: five plugin execs dominate."},
		}, {
			Name:    "Control plane",
			Figures: []*Figure{withNote(Measured("p99", "µs", 2.6, nil, &Target{Op: "<=", Limit: 50}), "in process")},
		}},
	}
}

func withNote(f *Figure, note string) *Figure { f.Note = note; return f }

func TestRender(t *testing.T) {
	md := Render(sampleReport())
	for _, want := range []string{
		"| cores | 2 |",
		"| date | 2026-12-02 14:05 UTC |",
		"1 of 2 measured targets met.",
		"- MISSED — Lifecycle: setup p50",
		"**Targets not measured in this run**",
		"- Lifecycle: dashboard p50",
		"| setup p50 (ms) | 148 | 0.84 | 176× | ≤ 100 | **NO — missed** |",
		`| teardown \| p50 (ms) | 0.000123 | — | — |  | — |`,
		"| dashboard p50 (ms) | not measured: agent unavailable: exited during start | — | — | ≤ 1000 | — |",
		"| p99 (µs) ¹ |",
		"- *p99*: in process",
		"- CNI: five plugin execs dominate.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("RESULTS.md lacks %q\n%s", want, md)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := sampleReport()
	if err := r.WriteJSON(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(filepath.Join(dir, "RESULTS.md")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	f := back.Areas[0].Figures[0]
	if *f.Value != 148 || *f.Baseline != 0.84 || *f.Met || f.Target.Limit != 100 {
		t.Errorf("round trip lost figures: %+v", f)
	}
	if back.Areas[0].Figures[2].NotMeasured == "" || back.Machine.Cores != 2 {
		t.Errorf("round trip lost fields: %+v", back)
	}
}

func TestFmtNum(t *testing.T) {
	for in, want := range map[float64]string{
		0: "0", 148.4: "148", 12345.6: "12346", 29.7: "29.7", 9.0: "9", 3.40: "3.4", 0.000123: "0.000123", 64: "64",
	} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestOptionsResolve(t *testing.T) {
	dir := t.TempDir()
	o := Options{Repo: dir}
	if err := o.resolve(""); err == nil || !strings.Contains(err.Error(), "no go.mod") {
		t.Errorf("resolve in a non-repo dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := o.resolve(""); err == nil || !strings.Contains(err.Error(), "make all") {
		t.Errorf("resolve without binaries: %v", err)
	}
	if _, err := NewRunner(Options{Repo: dir, Areas: []string{"bogus"}}); err == nil {
		t.Error("unknown area accepted")
	}
}

func TestRunnerWants(t *testing.T) {
	cases := []struct {
		areas []string
		key   string
		want  bool
	}{
		{nil, "dataplane", true},
		{[]string{"lifecycle"}, "lifecycle", true},
		{[]string{"lifecycle"}, "dataplane", false},
		{[]string{"controlplane", "dataplane"}, "dataplane", true},
	}
	for _, c := range cases {
		r, err := NewRunner(Options{Repo: t.TempDir(), Areas: c.areas})
		if err != nil {
			t.Fatalf("NewRunner(%v) = %v", c.areas, err)
		}
		if got := r.wants(c.key); got != c.want {
			t.Errorf("areas %v: wants(%q) = %v, want %v", c.areas, c.key, got, c.want)
		}
	}
}

func TestMainBadFlags(t *testing.T) {
	var out, errb strings.Builder
	if code := Main([]string{"-areas"}, &out, &errb); code != 2 {
		t.Errorf("missing flag value: exit %d", code)
	}
	if code := Main([]string{"extra"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unexpected arguments") {
		t.Errorf("extra argument: exit %d, stderr %q", code, errb.String())
	}
}
