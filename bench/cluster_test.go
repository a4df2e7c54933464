package bench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

func TestSimUpdates(t *testing.T) {
	allocs := []*structs.Allocation{
		{ID: "new", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending},
		{ID: "running", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning},
		{ID: "stopped", DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusRunning},
		{ID: "lost", DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusLost},
		{ID: "sent", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending},
	}
	sent := map[string]string{"sent": structs.AllocClientStatusRunning}
	got := map[string]string{}
	for _, u := range simUpdates(allocs, sent) {
		if u.DesiredStatus != "" || u.NodeID != "" || u.Job != nil {
			t.Errorf("update %s carries more than ID and client status: %+v", u.ID, u)
		}
		got[u.ID] = u.ClientStatus
	}
	want := map[string]string{"new": structs.AllocClientStatusRunning, "stopped": structs.AllocClientStatusComplete}
	if len(got) != len(want) {
		t.Fatalf("updates %v, want %v", got, want)
	}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("%s: %q, want %q", id, got[id], st)
		}
	}
	if ups := simUpdates(nil, sent); len(ups) != 0 {
		t.Errorf("no allocations gave %d updates", len(ups))
	}
}

func TestServerAgentConfig(t *testing.T) {
	cfg := serverAgentConfig("/scratch/data", []int{1001, 1002, 1003, 1004})
	for _, want := range []string{
		`data_dir  = "/scratch/data"`, `bind_addr = "127.0.0.1"`,
		"http         = 1001", "rpc          = 1002", "connect_http = 1003", "grpc         = 1004",
		`min_heartbeat_ttl = "2s"`, `heartbeat_grace   = "1s"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	server, client := strings.Index(cfg, "server {"), strings.Index(cfg, "client {")
	if server < 0 || client < 0 || !strings.Contains(cfg[client:], "enabled = false") || strings.Contains(cfg[server:client], "false") {
		t.Errorf("want the server role on and the client role off:\n%s", cfg)
	}
	if strings.Contains(cfg, "tls") {
		t.Errorf("the bench runs plaintext RPC on loopback:\n%s", cfg)
	}
}

func TestClusterJob(t *testing.T) {
	job := clusterJob("j", 10, 100)
	if *job.ID != "j" || len(job.TaskGroups) != 10 || len(job.Datacenters) != 1 || job.Datacenters[0] != "dc1" {
		t.Fatalf("job %s: %d groups, datacenters %v", *job.ID, len(job.TaskGroups), job.Datacenters)
	}
	total, names := 0, map[string]bool{}
	for _, tg := range job.TaskGroups {
		total += *tg.Count
		names[*tg.Name] = true
		task := tg.Tasks[0]
		if len(tg.Tasks) != 1 || task.Driver != "raw_exec" || *task.Resources.CPU != 10 || *task.Resources.MemoryMB != 10 {
			t.Errorf("group %s: %d tasks, driver %s", *tg.Name, len(tg.Tasks), task.Driver)
		}
	}
	if total != 1000 || len(names) != 10 {
		t.Errorf("%d allocations in %d distinct groups, want 1000 in 10", total, len(names))
	}
}

func TestClusterArithmetic(t *testing.T) {
	if got := perThousandMiB(10<<20, 30<<20, 1000); got != 20 {
		t.Errorf("perThousandMiB = %v, want 20", got)
	}
	if got := perThousandMiB(10<<20, 30<<20, 500); got != 40 {
		t.Errorf("perThousandMiB over 500 = %v, want 40", got)
	}
	if got := perThousandMiB(0, 1, 0); got != 0 {
		t.Errorf("perThousandMiB of no allocations = %v", got)
	}
	if got := perSecond(1000, 4*time.Second); got != 250 {
		t.Errorf("perSecond = %v, want 250", got)
	}
	if got := perSecond(5, 0); got != 0 || math.IsInf(got, 0) {
		t.Errorf("perSecond over no time = %v", got)
	}
}

func TestClusterFigures(t *testing.T) {
	ds := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	many := &clusterPhase{nodes: 50, ttl: 2 * time.Second, place: 4 * time.Second, idleRSS: 50 << 20, rss: 70 << 20,
		plan: ds(10, 30, 20), planRun: ds(100), hbRate: 7000, death: 3 * time.Second, deathLost: 20, placeFetches: 500}
	base := &clusterPhase{nodes: 1, place: time.Second, idleRSS: 50 << 20, rss: 90 << 20, plan: ds(5),
		hbErr: errors.New("boom"), placeFetches: 1}
	figs := clusterFigures(many, base)
	if len(figs) != 5 {
		t.Fatalf("%d figures, want 5", len(figs))
	}
	check := func(i int, value float64, baseline *float64) {
		t.Helper()
		f := figs[i]
		if f.Value == nil || *f.Value != value {
			t.Errorf("%s: value %v, want %v", f.Name, f.Value, value)
		}
		if (baseline == nil) != (f.Baseline == nil) || (baseline != nil && *baseline != *f.Baseline) {
			t.Errorf("%s: baseline %v, want %v", f.Name, f.Baseline, baseline)
		}
	}
	check(0, 250, ptr(1000.0))
	check(1, 30, ptr(5.0))
	check(2, 3, nil)
	check(3, 20, ptr(40.0))
	check(4, 7000, nil) // the baseline failed
	if !strings.Contains(figs[2].Note, "20 allocations") {
		t.Errorf("death note: %s", figs[2].Note)
	}

	many.placeErr = errors.New("no leader")
	figs = clusterFigures(many, base)
	if figs[0].Value != nil || figs[0].NotMeasured != "no leader" || figs[3].Value != nil {
		t.Errorf("a failed placement still gave figures: %+v %+v", figs[0], figs[3])
	}
	if f := clusterFindings(many, base); len(f) != 0 {
		t.Errorf("findings without a placement: %v", f)
	}
	many.placeErr = nil
	many.nodesDown = 3
	if f := clusterFindings(many, base); len(f) != 2 || !strings.Contains(f[0], "3 simulated nodes") {
		t.Errorf("findings %v", f)
	}
}
