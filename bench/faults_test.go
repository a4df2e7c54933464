package bench

import "testing"

func TestParseFaultFigures(t *testing.T) {
	out := `=== RUN   TestMeshSurvivesControlPlaneFaults/agent_SIGKILL_and_restart
    figures_test.go:18: FAULTFIG crash_failed 0
    figures_test.go:18: FAULTFIG crash_requests 2036
    mesh_test.go:44: agent crash: 2036 requests ok, 0 failed
    figures_test.go:18: FAULTFIG rss_added_mib 2.375
    figures_test.go:18: FAULTFIG broken notanumber
`
	got := ParseFaultFigures(out)
	want := map[string]float64{"crash_failed": 0, "crash_requests": 2036, "rss_added_mib": 2.375}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
