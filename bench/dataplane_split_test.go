package bench

import (
	"strings"
	"testing"
)

func TestParsePerfCount(t *testing.T) {
	out := "# started on ...\n\n123456,,raw_syscalls:sys_enter,5012345678,100.00,,\n"
	if n, err := parsePerfCount(out, "raw_syscalls:sys_enter"); err != nil || n != 123456 {
		t.Fatalf("parsePerfCount = %d, %v; want 123456", n, err)
	}
	if _, err := parsePerfCount("<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n", "raw_syscalls:sys_enter"); err == nil {
		t.Fatal("an uncounted event parsed")
	}
	if _, err := parsePerfCount("Error: no permission\n", "raw_syscalls:sys_enter"); err == nil {
		t.Fatal("output without the event parsed")
	}
}

func TestParseCtxSwitchesAndStatSplit(t *testing.T) {
	status := "Name:\tmeshlet\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n"
	if n := parseCtxSwitches(status); n != 127 {
		t.Fatalf("parseCtxSwitches = %d, want 127", n)
	}
	stat := "42 (meshlet connect) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 7 0 100 0 0"
	user, sys, err := parseProcStatSplit(stat)
	if err != nil || user != 2.5 || sys != 0.75 {
		t.Fatalf("parseProcStatSplit = %v, %v, %v; want 2.5, 0.75", user, sys, err)
	}
	if total, _ := ParseProcStat(stat); total != 3.25 {
		t.Fatalf("ParseProcStat = %v, want 3.25", total)
	}
}

// TestSplitFinding: each proxy's CPU per request is split into user and
// kernel µs from the rounds' usage and the fixed rate held, and meshlet is
// compared with the peer that costs least per role.
func TestSplitFinding(t *testing.T) {
	arm := func(user, sys float64) *armRuns {
		u := map[string]sidecarUsage{}
		for _, role := range proxyRoles {
			u[role] = sidecarUsage{name: role, vcpu: user + sys, user: user, sys: sys, switches: 2000}
		}
		return &armRuns{fixed: []FortioResult{{ActualQPS: 1000}}, usage: []map[string]sidecarUsage{u}}
	}
	runs := &dpRuns{arms: map[string]*armRuns{
		armMeshlet: arm(0.040, 0.035),
		"HAProxy":  arm(0.030, 0.040),
		"nginx":    arm(0.028, 0.036),
	}, syscalls: map[string]map[string]float64{armMeshlet: {"client sidecar": 14.5}}}
	got := splitFinding(runs)
	for _, want := range []string{
		"meshlet client sidecar 40.0 µs user + 35.0 µs kernel, 2.0 context switches, 14.5 system calls",
		"nginx server sidecar 28.0 µs user + 36.0 µs kernel, 2.0 context switches.",
		"client sidecar +11.0 µs against nginx (user +12.0, kernel -1.0)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("finding lacks %q:\n%s", want, got)
		}
	}
	if splitFinding(&dpRuns{arms: map[string]*armRuns{"nginx": arm(0.03, 0.03)}}) != "" {
		t.Error("a finding without meshlet's sidecars")
	}
}
