package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/jobspecs"
)

// fortioRound is canned fortio -json output of one run: 200 requests
// at qps with the given p50 and p99 (seconds).
func fortioRound(t *testing.T, qps, p50, p99 float64) FortioResult {
	t.Helper()
	js := fmt.Sprintf(`{"ActualQPS": %g, "RetCodes": {"200": 200}, "Sockets": [1, 1],
	"DurationHistogram": {"Count": 200, "Avg": %g, "Percentiles": [
	{"Percentile": 50, "Value": %g}, {"Percentile": 90, "Value": %g}, {"Percentile": 99, "Value": %g}]}}`, qps, p50, p50, p99, p99)
	r, err := ParseFortio([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gwRuns is an arm's rounds from canned fortio output: p50 and p99 in ms
// per round at the fixed rate, and the max-rate runs' rps.
func gwRuns(t *testing.T, qps float64, p50, p99, maxRPS []float64) *armRuns {
	a := &armRuns{errs: map[string]error{}}
	for i := range p50 {
		a.fixed = append(a.fixed, fortioRound(t, qps, p50[i]/1000, p99[i]/1000))
		a.maxRPS = append(a.maxRPS, fortioRound(t, maxRPS[i], 0.001, 0.002).ActualQPS)
		a.usage = append(a.usage, map[string]sidecarUsage{
			gwProcGateway: {vcpu: 0.1 + 0.01*float64(i), pss: 12, topThread: 0.9},
			gwProcSidecar: {vcpu: 0.05, pss: 10},
			gwProcApp:     {vcpu: 0.02, pss: 8},
		})
	}
	return a
}

func TestGatewayFigures(t *testing.T) {
	direct := gwRuns(t, 1000, []float64{0.3, 0.2, 0.25}, []float64{1, 0.8, 0.9}, []float64{10000, 12000, 11000})
	gw := gwRuns(t, 999, []float64{0.6, 0.5, 0.7}, []float64{2, 3, 2.5}, []float64{5000, 4000, 4400})
	rows := rowsByName(gatewayFigures(direct, gw, nil))
	if len(rows) != 7 {
		t.Fatalf("%d figures, want p50, p99, max rps and the gateway's and sidecar's CPU and PSS", len(rows))
	}
	p50, p99, maxRPS := rows[gwP50Name], rows[gwP99Name], rows[gwMaxName]
	if p50 == nil || p50.Value == nil || !approx(*p50.Value, 0.6) || !approx(*p50.Baseline, 0.25) {
		t.Fatalf("p50 row = %+v, want medians 0.6 and 0.25 ms", p50)
	}
	if !strings.HasPrefix(p50.Note, "added 0.350 ms.") || !strings.Contains(p50.Note, "Median of 3 interleaved runs; per-run ratios 2–2.8.") {
		t.Errorf("p50 note %q", p50.Note)
	}
	if strings.Contains(p50.Note, "held only") {
		t.Errorf("p50 note %q warns about a rate the runs held", p50.Note)
	}
	if p99 == nil || p99.Value == nil || !approx(*p99.Value, 2.5) || !approx(*p99.Baseline, 0.9) || p99.Target != nil {
		t.Errorf("p99 row = %+v, want medians 2.5 and 0.9 ms without target", p99)
	}
	if maxRPS == nil || maxRPS.Ratio == nil || !approx(*maxRPS.Ratio, 0.4) || maxRPS.Unit != "1/s" {
		t.Errorf("max rps row = %+v, want 4400/11000 = 0.4", maxRPS)
	}
	gwCPU := rows["gateway CPU per 1,000 rps through the gateway (baseline: server app)"]
	if gwCPU == nil || gwCPU.Value == nil || !approx(*gwCPU.Value, 0.11) || !approx(*gwCPU.Baseline, 0.02) ||
		!strings.Contains(gwCPU.Note, "110 µs of CPU per request") {
		t.Errorf("gateway CPU row = %+v, want median 0.11 vCPU against the app's 0.02", gwCPU)
	}
	if f := rows["server sidecar memory (PSS) at 1,000 rps through the gateway (baseline: server app)"]; f == nil || f.Value == nil || *f.Value != 10 || *f.Baseline != 8 {
		t.Errorf("sidecar PSS row = %+v", f)
	}
	// A round whose processes were not watched: the median of the others,
	// and the notes say so.
	unwatched := gwRuns(t, 999, []float64{0.6, 0.5}, []float64{2, 3}, []float64{5000, 4000})
	unwatched.usage[1] = nil
	urows := rowsByName(gatewayFigures(direct, unwatched, nil))
	if f := urows["gateway CPU per 1,000 rps through the gateway (baseline: server app)"]; f.Value == nil || !approx(*f.Value, 0.1) ||
		!strings.Contains(f.Note, "Not watched in every round ("+ErrNoProcess.Error()) {
		t.Errorf("unwatched round, CPU: %+v", f)
	}
	if f := urows["gateway memory (PSS) at 1,000 rps through the gateway (baseline: server app)"]; !strings.HasPrefix(f.Note, "Not watched in every round") {
		t.Errorf("unwatched round, PSS note %q", f.Note)
	}
	// A gateway process never found: its rows are not measured.
	for _, u := range unwatched.usage[:1] {
		delete(u, gwProcGateway)
	}
	if f := rowsByName(gatewayFigures(direct, unwatched, nil))["gateway CPU per 1,000 rps through the gateway (baseline: server app)"]; f.Value != nil || f.NotMeasured == "" {
		t.Errorf("gateway process not found: %+v", f)
	}

	// Gateway runs that fell behind the fixed rate say so.
	slow := gwRuns(t, 700, []float64{0.6}, []float64{2}, []float64{5000})
	if n := rowsByName(gatewayFigures(direct, slow, nil))[gwP50Name].Note; !strings.Contains(n, "held only 700 rps") {
		t.Errorf("slow gateway p50 note %q", n)
	}
	// A failed block leaves its figures not measured, with the reason.
	gw.errs["max rate"] = errors.New("fortio: 3 of 900 requests failed")
	rows = rowsByName(gatewayFigures(direct, gw, nil))
	if f := rows[gwMaxName]; f.Value != nil || !strings.Contains(f.NotMeasured, "3 of 900") {
		t.Errorf("max rps with a failed block = %+v", f)
	}
	if rows[gwP50Name].Value == nil {
		t.Error("a failed max-rate block dropped the latency figures")
	}
	direct.errs["fixed rate"] = errors.New("no traffic")
	if f := rowsByName(gatewayFigures(direct, gw, nil))[gwP99Name]; f.Value != nil || f.NotMeasured != "no traffic" {
		t.Errorf("p99 with a failed direct block = %+v", f)
	}
	// No job: every figure is there, not measured.
	for _, f := range gatewayFigures(nil, nil, ErrMissingTool) {
		if f.Value != nil || !strings.Contains(f.NotMeasured, "not installed") {
			t.Errorf("without fortio: %+v", f)
		}
	}
}

func TestFortioArgsHost(t *testing.T) {
	s := LoadSpec{URL: "http://10.0.0.2:8080/", QPS: 1000, Conns: 10, Duration: 10 * time.Second, KeepAlive: true, Host: gwHost}
	args := s.fortioArgs("/tmp/out.json")
	i := slices.Index(args, "-H")
	if i < 0 || args[i+1] != "Host: "+gwHost || args[len(args)-1] != s.URL {
		t.Errorf("args %q: want -H \"Host: %s\" before the URL", args, gwHost)
	}
	s.Host = ""
	if slices.Contains(s.fortioArgs("/tmp/out.json"), "-H") {
		t.Error("a spec without Host sets a header")
	}
}

// TestGatewayInput checks bench/input/gateway.hcl parses and agrees with
// the constants the area drives it with.
func TestGatewayInput(t *testing.T) {
	job, diags := jobspecs.ParseFile("input/gateway.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if job.ID != gwJob || len(job.TaskGroups) != 3 {
		t.Fatalf("job %q with %d groups, want %q with 3", job.ID, len(job.TaskGroups), gwJob)
	}
	var found bool
	for _, tg := range job.TaskGroups {
		for _, s := range tg.Services {
			if !s.Connect.IsIngress() {
				continue
			}
			for _, l := range s.Connect.Gateway.Ingress.Listeners {
				for _, svc := range l.Services {
					found = found || (l.Port == gwPort && l.Protocol == "http" && slices.Contains(svc.Hosts, gwHost))
				}
			}
		}
	}
	if !found {
		t.Errorf("no http ingress listener on %d routing %s", gwPort, gwHost)
	}
}
