package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

func TestDashFigures(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		name        string
		mesh, plain []time.Duration
		err         error
		wantMet     *bool
		wantBase    bool
		wantReason  string
	}{
		{"met", ms(900, 800, 950), ms(300, 310, 320), nil, ptr(true), true, ""},
		{"missed", ms(1200, 1300, 1100), ms(300, 310, 320), nil, ptr(false), true, ""},
		{"baseline failed", ms(900), nil, errors.New("plain dashboard job: boom"), ptr(true), false, ""},
		{"not measured", nil, nil, errors.New("agent unavailable: exited"), nil, false, "agent unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			figs := dashFigures(tt.mesh, tt.plain, tt.err)
			f := figs[0]
			if tt.wantReason != "" {
				if !strings.Contains(f.NotMeasured, tt.wantReason) || f.Target == nil {
					t.Fatalf("figure %+v", f)
				}
				return
			}
			if f.Met == nil || *f.Met != *tt.wantMet {
				t.Errorf("Met = %v, want %v", deref(f.Met), *tt.wantMet)
			}
			if (f.Baseline != nil) != tt.wantBase {
				t.Errorf("Baseline = %v", deref(f.Baseline))
			}
			if tt.err != nil && !strings.Contains(f.Note, tt.err.Error()) {
				t.Errorf("note %q lacks the baseline error", f.Note)
			}
		})
	}
}

func TestManyFigures(t *testing.T) {
	figs := manyFigures(&manyResult{bridge: 12 * time.Second, host: 2 * time.Second, idleRSS: 30 << 20, bridgeRSS: 50 << 20,
		execAnon: []float64{8 << 20, 7 << 20, 9 << 20}}, nil)
	if *figs[0].Ratio != 6 || *figs[1].Value != 50 || *figs[1].Baseline != 30 || *figs[2].Value != 8 {
		t.Errorf("figures: %+v %+v %+v", figs[0], figs[1], figs[2])
	}
	if !strings.Contains(figs[1].Note, "205 KiB per allocation") {
		t.Errorf("note %q", figs[1].Note)
	}
	if figs := manyFigures(&manyResult{}, nil); figs[2].NotMeasured == "" {
		t.Errorf("executor figure without samples: %+v", figs[2])
	}
	figs = manyFigures(nil, errors.New("bridge mode: job failed"))
	if len(figs) != 3 || figs[0].NotMeasured != "bridge mode: job failed" {
		t.Errorf("figure %+v", figs[0])
	}
}

func TestSidecarFiguresAndFinding(t *testing.T) {
	usage := map[string]sidecarUsage{
		"client sidecar": {vcpu: 0.3, mb: 41, anon: 12, pss: 35, topThread: 0.97},
		"server sidecar": {vcpu: 0.05, mb: 40, anon: 9, pss: 14},
		"server app":     {vcpu: 0.1, mb: 30, anon: 5, pss: 10},
	}
	figs := sidecarFigures(usage, nil, nil)
	if len(figs) != 8 {
		t.Fatalf("%d figures", len(figs))
	}
	// Per side: CPU and PSS (with targets), then VmRSS and private memory
	// (informative, no target).
	wantMet := []bool{false, false, false, false, true, true, false, false}
	for i, f := range figs {
		if f.Baseline == nil {
			t.Errorf("%s: no app baseline", f.Name)
		}
		if i%4 >= 2 {
			if f.Target != nil || f.Value == nil {
				t.Errorf("%s: want an informative figure: %+v", f.Name, f)
			}
			continue
		}
		if f.Met == nil || *f.Met != wantMet[i] {
			t.Errorf("%s: Met = %v, want %v", f.Name, deref(f.Met), wantMet[i])
		}
	}
	if !strings.Contains(figs[0].Note, "busiest thread used 97 %") {
		t.Errorf("CPU note %q", figs[0].Note)
	}
	if !strings.Contains(figs[5].Note, "VmRSS is 40.0 MB, of which 31.0 MB") {
		t.Errorf("PSS note %q", figs[5].Note)
	}
	got := cpuFinding(figs)
	for _, want := range []string{"client sidecar 300 µs", "server sidecar 50 µs"} {
		if !strings.Contains(got, want) {
			t.Errorf("finding %q lacks %q", got, want)
		}
	}
	missing := sidecarFigures(map[string]sidecarUsage{}, nil, nil)
	if missing[0].NotMeasured == "" || missing[0].Target == nil {
		t.Errorf("missing process: %+v", missing[0])
	}
	lat := Measured("HTTP latency p50 at 1,000 rps", "ms", 1.2, ptr(0.3), nil)
	if got := hopFinding([]*Figure{lat}); !strings.Contains(got, "0.15 ms per crossing") || !strings.Contains(got, "near 0.90 ms (+0.60 ms)") {
		t.Errorf("hopFinding = %q", got)
	}
	if hopFinding(dataPlaneNotMeasured("no agent")) != "" {
		t.Error("hop finding without a measured latency")
	}
	if cpuFinding(dataPlaneNotMeasured("no agent")) != "" {
		t.Error("finding without figures")
	}
}

// The process finder locates this test process in its own namespace.
func TestFindProcInNetns(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pids, err := FindProcInNetns("/proc/self/ns/net", []string{filepath.Base(exe)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range pids {
		found = found || p == os.Getpid()
	}
	if !found {
		t.Errorf("pid %d not among %v", os.Getpid(), pids)
	}
	s, err := SampleProc(os.Getpid())
	if err != nil || s.RSSBytes <= 0 || s.ThreadCPU[os.Getpid()] < 0 || len(s.ThreadCPU) < 2 {
		t.Errorf("SampleProc = %+v, %v (want this process's threads, the main one included)", s, err)
	}
	if _, err := FindProcInNetns("/proc/self/ns/net", []string{"no-such-command-xyz"}, nil); !errors.Is(err, ErrNoProcess) {
		t.Errorf("err = %v, want ErrNoProcess", err)
	}
}

func TestBareNetns(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	setups, teardowns, err := bareNetns(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(setups) != 3 || len(teardowns) != 3 {
		t.Fatalf("got %d setups, %d teardowns", len(setups), len(teardowns))
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

func TestBusiestThreadShare(t *testing.T) {
	before := ProcSample{ThreadCPU: map[int]float64{1: 1, 2: 5}}
	after := ProcSample{ThreadCPU: map[int]float64{1: 1.5, 2: 6.5, 3: 0.5}} // thread 3 started in between
	if got := busiestThreadShare(before, after); got != 0.6 {
		t.Errorf("share = %v, want 0.6 (1.5 of 2.5 s)", got)
	}
	if got := busiestThreadShare(before, before); got != 0 {
		t.Errorf("share without CPU = %v, want 0", got)
	}
}
