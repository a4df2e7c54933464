package traffic

import (
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

// service-defaults through the real agent: service-a's UpstreamConfig
// gives service-b a passive health check, so the instance answering 503
// to everything is ejected after MaxFailures consecutive failures and no
// further request reaches it.
func TestPassiveHealthCheckEjects(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("testdata/passive-health.hcl")
	allocs := a.RunningAllocs(job, 3)
	svcA := a.AllocByGroup(allocs, "service-a")
	// tcp for now: one connection per get, so count over several.
	seen := map[string]int{}
	a.Eventually(30*time.Second, "both service-b instances answering through service-a's upstream", func() bool {
		for line, n := range tally(t, a, svcA.ID, "/", 5) {
			seen[line] += n
		}
		return seen["200 good"] > 0 && seen["503 bad flaked"] > 0
	})

	// Written with the official client: the HTTP protocol (so the
	// upstream is an HTTP connection manager) and the caller's upstream
	// config.
	client := a.Consul().ConfigEntries()
	ejection := 5 * time.Minute
	maxPercent := uint32(50)
	for _, e := range []consulapi.ConfigEntry{
		&consulapi.ServiceConfigEntry{Kind: consulapi.ServiceDefaults, Name: "service-b", Protocol: "http"},
		&consulapi.ServiceConfigEntry{Kind: consulapi.ServiceDefaults, Name: "service-a", UpstreamConfig: &consulapi.UpstreamConfiguration{
			Overrides: []*consulapi.UpstreamConfig{{Name: "service-b", PassiveHealthCheck: &consulapi.PassiveHealthCheck{
				Interval: time.Second, MaxFailures: 3, MaxEjectionPercent: &maxPercent, BaseEjectionTime: &ejection,
			}}},
		}},
	} {
		if ok, _, err := client.Set(e, nil); err != nil || !ok {
			t.Fatalf("config write %s: %v %v", e.GetName(), ok, err)
		}
	}
	got, _, err := client.Get(consulapi.ServiceDefaults, "service-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := got.(*consulapi.ServiceConfigEntry).UpstreamConfig.Overrides; len(o) != 1 || o[0].PassiveHealthCheck.MaxFailures != 3 {
		t.Fatalf("service-a defaults read back = %+v", got)
	}

	// Once the sidecar has the outlier detection, the bad instance fails
	// at most MaxFailures requests and then gets none.
	a.Eventually(20*time.Second, "the failing instance ejected", func() bool {
		return failures(tally(t, a, svcA.ID, "/", 20)) == 0
	})
	c := tally(t, a, svcA.ID, "/", 300)
	if c["200 good"] != 300 {
		t.Fatalf("300 requests after the ejection = %v; want all from the good instance", c)
	}
	// The sidecar's admin counts exactly one ejection.
	r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "http://127.0.0.2:19001/stats?filter=ejections_enforced_total")
	if r.Code != 0 || !strings.Contains(r.Stdout, "outlier_detection.ejections_enforced_total: 1") {
		t.Fatalf("admin /stats: exit %d: %.600s", r.Code, r.Stdout)
	}
}
