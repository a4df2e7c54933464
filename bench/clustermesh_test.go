package bench

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/structs"
)

func TestParseClusterEndpoints(t *testing.T) {
	page := strings.Join([]string{
		"bm-x.default.dc1.internal.11111111-2222.consul::default_priority::max_connections::1024",
		"bm-x.default.dc1.internal.11111111-2222.consul::10.210.100.5:24001::health_flags::healthy",
		"bm-x.default.dc1.internal.11111111-2222.consul::10.210.100.6:24002::health_flags::/failed_active_hc",
		"bm-xy.default.dc1.internal.11111111-2222.consul::10.210.100.7:24003::health_flags::healthy",
		"local_app::127.0.0.1:7000::health_flags::healthy",
	}, "\n") + "\n"
	eps := ParseClusterEndpoints(page, "bm-x")
	want := map[string]string{"10.210.100.5:24001": "healthy", "10.210.100.6:24002": "/failed_active_hc"}
	if len(eps) != len(want) {
		t.Fatalf("endpoints %v, want %v", eps, want)
	}
	for k, v := range want {
		if eps[k] != v {
			t.Errorf("endpoint %s: %q, want %q", k, eps[k], v)
		}
	}
	if n := countHealthy([]byte(page)); n != -1 {
		t.Errorf("countHealthy with an unhealthy endpoint = %d, want -1", n)
	}
	if n := countHealthy([]byte(strings.ReplaceAll(page, "/failed_active_hc", "healthy"))); n != 2 {
		t.Errorf("countHealthy = %d, want 2", n)
	}
	if n := countCatalog([]byte(`[{"Node":{}},{"Node":{}}]`)); n != 2 {
		t.Errorf("countCatalog = %d, want 2", n)
	}
	if n := countCatalog([]byte(`not json`)); n != -1 {
		t.Errorf("countCatalog of garbage = %d, want -1", n)
	}
}

func TestFeedCounter(t *testing.T) {
	a := &structs.Allocation{ID: "0b2f8c1e-0000-4000-8000-000000000001", TaskGroup: "g00"}
	insts := fanInstances("node-1", a, 7, 0)
	if len(insts) != 2 || insts[1].Kind != catalog.KindConnectProxy || insts[1].Proxy.DestinationServiceID != insts[0].ID {
		t.Fatalf("fanInstances = %+v, want a service and its sidecar", insts)
	}
	if moved := fanInstances("node-1", a, 7, 1); moved[1].Port == insts[1].Port || moved[0].Port != insts[0].Port {
		t.Fatalf("a churn generation must move the sidecar's port only: %d → %d", insts[1].Port, moved[1].Port)
	}
	reset := meshstate.Batch{Revision: 10, Reset: true, Allocs: []meshstate.AllocRegs{{NodeID: "node-1", AllocID: a.ID, Instances: insts}}}
	change := meshstate.Batch{Revision: 11, Allocs: []meshstate.AllocRegs{{NodeID: "node-1", AllocID: a.ID}}}
	line := func(b meshstate.Batch) int64 {
		data, err := json.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(data)) + 1
	}
	sizes := &sync.Map{}
	c1, c2 := newFeedCounter(sizes), newFeedCounter(sizes)
	for _, c := range []*feedCounter{c1, c2} {
		if err := c.add(reset); err != nil {
			t.Fatal(err)
		}
	}
	if err := c1.add(change); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c2.firstReset:
	default:
		t.Fatal("a reset did not mark the counter's first reset")
	}
	msgs, bytes, resetBytes := feedTotals([]*feedCounter{c1, c2})
	if msgs != 1 || bytes != line(change) || resetBytes != 2*line(reset) {
		t.Fatalf("totals msgs %d bytes %d reset bytes %d, want 1, %d, %d", msgs, bytes, resetBytes, line(change), 2*line(reset))
	}
	if c1.rev.Load() != 11 || c2.rev.Load() != 10 {
		t.Fatalf("revisions %d, %d, want 11, 10", c1.rev.Load(), c2.rev.Load())
	}
}

func TestFanFigures(t *testing.T) {
	f := &fanResult{agent: [3]int64{20, 20_000, 1 << 20}, proxies: [3]int64{20_000, 20_000_000, 1 << 30},
		changes: 200, window: 10 * time.Second}
	figs := fanFigures(f)
	if len(figs) != 2 || figs[0].Unit != "B/s" || figs[1].Unit != "1/s" {
		t.Fatalf("figures %+v", figs)
	}
	if *figs[0].Value != 2000 || *figs[0].Baseline != 2_000_000 || *figs[0].Ratio != 0.001 {
		t.Errorf("bytes figure %v / %v (ratio %v), want 2000 / 2e6 (0.001)", *figs[0].Value, *figs[0].Baseline, *figs[0].Ratio)
	}
	if *figs[1].Value != 2 || *figs[1].Baseline != 2000 {
		t.Errorf("messages figure %v / %v, want 2 / 2000", *figs[1].Value, *figs[1].Baseline)
	}
	if !strings.Contains(figs[0].Note, "1.0 GiB") && !strings.Contains(figs[0].Note, "1024.0 MiB") {
		t.Errorf("bytes note does not give the per-proxy resets' size: %s", figs[0].Note)
	}
}

func TestEdgeFigures(t *testing.T) {
	d := func(msx ...int) []time.Duration {
		var out []time.Duration
		for _, m := range msx {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	e := &edgeResult{names: []string{"servers' catalog", "c1", "c2", "c3"}, times: map[string][]time.Duration{
		"servers' catalog": d(100, 50, 300), "c1": d(110, 60, 310), "c2": d(120, 90, 305), "c3": d(150, 55, 330)}}
	figs := edgeFigures(e)
	if len(figs) != 4 {
		t.Fatalf("%d figures, want 3 nodes and the slowest", len(figs))
	}
	// Slowest per change: 150, 90, 330 → median 150; catalog median 100.
	last := figs[3]
	if *last.Value != 150 || *last.Baseline != 100 {
		t.Errorf("slowest node median %v (baseline %v), want 150 (100)", *last.Value, *last.Baseline)
	}
	if *figs[1].Value != 120 || !strings.Contains(figs[1].Name, "c2") {
		t.Errorf("c2's figure %s = %v, want 120", figs[1].Name, *figs[1].Value)
	}
	if got := edgeFigures(&edgeResult{err: ErrNoProcess}); len(got) != 1 || got[0].Value != nil {
		t.Errorf("a failed run gave %+v", got)
	}
}
