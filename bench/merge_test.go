package bench

import (
	"path/filepath"
	"strings"
	"testing"
)

func names(r *Report) string {
	var ns []string
	for _, a := range r.Areas {
		ns = append(ns, a.Name)
	}
	return strings.Join(ns, ", ")
}

func TestMergeReports(t *testing.T) {
	// Results written before areas carried their key.
	prev := &Report{
		Machine: Machine{Date: "2026-12-03 20:22 UTC", Commit: "70b4d57"}, Duration: "20m35s",
		Areas: []*Area{
			{Name: "Allocation lifecycle", Figures: []*Figure{Measured("setup", "ms", 107, nil, nil)}},
			{Name: "Data plane (built-in proxy)"},
			{Name: "Control plane", Figures: []*Figure{Measured("old", "ms", 1, nil, nil)}},
			{Name: "Cluster mesh"},
		},
	}
	cur := &Report{
		Machine: Machine{Date: "2026-12-04 15:40 UTC", Commit: "abc1234"}, Duration: "2m0s",
		Areas: []*Area{
			{Name: "L7 routing (built-in proxy)", Key: "l7", Figures: []*Figure{Measured("cpu", "µs", 110, ptr(100.0), nil)}},
			{Name: "Control plane", Key: "controlplane", Figures: []*Figure{Measured("new", "ms", 2, nil, nil)}},
		},
	}
	got := MergeReports(prev, cur)
	if want := "Allocation lifecycle, Data plane (built-in proxy), L7 routing (built-in proxy), Control plane, Cluster mesh"; names(got) != want {
		t.Errorf("areas %q, want %q", names(got), want)
	}
	if got.Machine.Commit != "70b4d57" || got.Duration != "20m35s" {
		t.Errorf("machine/duration not the full run's: %+v %s", got.Machine, got.Duration)
	}
	if got.Areas[3].Figures[0].Name != "new" || got.Areas[0].Figures[0].Name != "setup" {
		t.Errorf("control plane not replaced or lifecycle lost: %+v", got.Areas)
	}
	for _, i := range []int{2, 3} {
		if !strings.Contains(got.Areas[i].Run, "on 2026-12-04 15:40 UTC at commit abc1234") {
			t.Errorf("area %s run %q", got.Areas[i].Name, got.Areas[i].Run)
		}
	}
	if got.Areas[0].Run != "" || cur.Areas[0].Run != "" || len(prev.Areas) != 4 || prev.Areas[2].Figures[0].Name != "old" {
		t.Error("merge modified its inputs or marked an old area")
	}
	md := Render(got)
	if !strings.Contains(md, "## L7 routing (built-in proxy)\n\n_Measured in a separate run (`-areas l7`)") ||
		!strings.Contains(md, "## Allocation lifecycle") || !strings.Contains(md, "| run time | 20m35s |") {
		t.Errorf("merged RESULTS.md:\n%s", md)
	}

	// A second partial run of the same area replaces the first.
	again := MergeReports(got, &Report{Areas: []*Area{{Name: "L7 routing (built-in proxy)", Key: "l7"}}})
	if names(again) != names(got) || len(again.Areas[2].Figures) != 0 {
		t.Errorf("re-merge: %q", names(again))
	}
	// An area unknown to this version goes last.
	odd := MergeReports(prev, &Report{Areas: []*Area{{Name: "Elsewhere", Key: "elsewhere"}}})
	if !strings.HasSuffix(names(odd), "Cluster mesh, Elsewhere") {
		t.Errorf("unknown area: %q", names(odd))
	}
}

func TestReadReportRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	if _, err := ReadReport(path); err == nil {
		t.Error("missing file read")
	}
	r := sampleReport()
	r.Areas[0].Key = "lifecycle"
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil || back.Areas[0].Key != "lifecycle" || *back.Areas[0].Figures[0].Value != 148 {
		t.Fatalf("ReadReport = %+v, %v", back, err)
	}
}
