// Package traffic holds the end-to-end tests of L7 traffic management:
// config entries written with the CLI and the official consul/api client,
// compiled into the sidecars' routes, splits and retries, and L7
// intentions decided request by request.
package traffic

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

const upstream = "http://127.0.0.1:9000"

// tally runs n requests to path from service-a's allocation (straight to
// its upstream listener for service-b) and counts the answers by line
// ("200 v1", "503 v1 flaked", "error ...").
func tally(t *testing.T, a *framework.Agent, allocID, path string, n int, headers ...string) map[string]int {
	t.Helper()
	args := []string{a.Bin, "demo-app", "get", "-timeout", "5s", "-n", fmt.Sprint(n)}
	for _, h := range headers {
		args = append(args, "-header", h)
	}
	r := a.Exec(allocID, "service-a", append(args, upstream+path)...)
	if r.Code != 0 {
		t.Fatalf("get -n %d %s: exit %d: %s", n, path, r.Code, r.Stderr)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		out[line]++
	}
	return out
}

func failures(counts map[string]int) int {
	bad := 0
	for line, n := range counts {
		if !strings.HasPrefix(line, "200 ") {
			bad += n
		}
	}
	return bad
}

// The seed scenario: service-b v1 and v2, a resolver with subsets, a 90/10
// splitter, a router sending /admin and "x-canary: 1" to v2, retries that
// hide a flaky v1 instance, and a promotion to 0/100 that takes effect
// within a second without a failed request.
func TestCanaryRoutingSplitAndRetries(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("../../jobspecs/canary.hcl")
	allocs := a.RunningAllocs(job, 4)
	svcA := a.AllocByGroup(allocs, "service-a")
	a.Eventually(30*time.Second, "service-b answering through service-a's upstream", func() bool {
		r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "-timeout", "3s", upstream+"/")
		return r.Code == 0
	})

	for _, f := range []string{"01-service-b-defaults.hcl", "02-service-b-resolver.hcl", "03-service-b-splitter.hcl", "04-service-b-router.hcl"} {
		a.MustCLI("config", "write", "../../config/canary/"+f)
	}
	if out := a.MustCLI("config", "list", "-kind", "service-router"); strings.TrimSpace(out) != "service-b" {
		t.Fatalf("config list -kind service-router = %q", out)
	}
	entry, _, err := a.Consul().ConfigEntries().Get(consulapi.ServiceResolver, "service-b", nil)
	if err != nil {
		t.Fatalf("official client Get resolver: %v", err)
	}
	if res := entry.(*consulapi.ServiceResolverConfigEntry); res.DefaultSubset != "v1" || res.Subsets["v2"].Filter != "Service.Meta.version == v2" {
		t.Fatalf("resolver read back = %+v", res)
	}

	// The router reached the sidecar once /admin answers v2 every time.
	a.Eventually(10*time.Second, "/admin routed to v2", func() bool {
		c := tally(t, a, svcA.ID, "/admin", 10)
		return c["200 v2"] == 10
	})
	if c := tally(t, a, svcA.ID, "/admin/users", 50); c["200 v2"] != 50 {
		t.Fatalf("/admin/users x50 = %v; want all v2", c)
	}
	if c := tally(t, a, svcA.ID, "/", 50, "x-canary: 1"); c["200 v2"] != 50 {
		t.Fatalf("x-canary: 1 x50 = %v; want all v2", c)
	}

	c := tally(t, a, svcA.ID, "/", 1000)
	v1, v2, bad := c["200 v1"], c["200 v2"], failures(c)
	t.Logf("1,000 requests: v1=%d v2=%d failed=%d (%v)", v1, v2, bad, c)
	if bad > 10 {
		t.Fatalf("%d of 1,000 requests failed through the retries (want <= 1%%): %v", bad, c)
	}
	if v2 < 70 || v2 > 130 || v1+v2+bad != 1000 {
		t.Fatalf("split v1=%d v2=%d; want 90/10 within ±3%%", v1, v2)
	}

	// Promote v2 while requests flow: none fails, and a second after the
	// write every request reaches v2.
	var wg sync.WaitGroup
	var during map[string]int
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "-timeout", "5s", "-n", "300", "-every", "10ms", upstream+"/")
		during = map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			during[line]++
		}
	}()
	time.Sleep(time.Second)
	a.MustCLI("config", "write", "../../config/canary/05-service-b-promote.json")
	time.Sleep(time.Second)
	if c := tally(t, a, svcA.ID, "/", 100); c["200 v2"] != 100 {
		t.Fatalf("1 s after promoting v2, 100 requests = %v; want all v2", c)
	}
	wg.Wait()
	if bad := failures(during); bad != 0 {
		t.Fatalf("%d requests failed while the split changed: %v", bad, during)
	}

	// The sidecar's admin config_dump shows the route configuration.
	r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "http://127.0.0.2:19001/config_dump")
	if r.Code != 0 || !strings.Contains(r.Stdout, "RoutesConfigDump") || !strings.Contains(r.Stdout, "/admin") {
		t.Fatalf("config_dump lacks the routes: exit %d: %.400s", r.Code, r.Stdout)
	}
	// Deleting the router's resolver is refused while the router needs it.
	if r := a.CLI("config", "delete", "-kind", "service-resolver", "-name", "service-b"); r.Code == 0 {
		t.Fatalf("config delete of a resolver in use succeeded: %s", r.Stdout)
	}
}

// L7 intentions: a permission list decides each HTTP request; a deny on
// /admin answers 403 while other paths pass.
func TestL7Intentions(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("../../jobspecs/canary.hcl")
	allocs := a.RunningAllocs(job, 4)
	svcA := a.AllocByGroup(allocs, "service-a")
	a.MustCLI("config", "write", "../../config/canary/01-service-b-defaults.hcl")
	a.Eventually(30*time.Second, "service-b answering through service-a's upstream", func() bool {
		r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "-timeout", "3s", upstream+"/")
		return r.Code == 0
	})
	_, err := a.Consul().Connect().IntentionUpsert(&consulapi.Intention{
		SourceName: "service-a", DestinationName: "service-b",
		Permissions: []*consulapi.IntentionPermission{
			{Action: consulapi.IntentionActionDeny, HTTP: &consulapi.IntentionHTTPPermission{PathPrefix: "/admin"}},
			{Action: consulapi.IntentionActionAllow, HTTP: &consulapi.IntentionHTTPPermission{PathPrefix: "/", Methods: []string{"GET"}}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Eventually(10*time.Second, "/admin denied", func() bool {
		c := tally(t, a, svcA.ID, "/admin", 5)
		for line := range c {
			if !strings.HasPrefix(line, "403 ") {
				return false
			}
		}
		return true
	})
	if c := tally(t, a, svcA.ID, "/public", 20); c["200 v1"]+c["200 v2"]+c["503 v1 flaked"] != 20 {
		t.Fatalf("/public x20 = %v; want allowed", c)
	}
	// intention check exits 1 on "Denied" (0 allowed, 2 error).
	if r := a.CLI("intention", "check", "-path", "/admin", "service-a", "service-b"); r.Code != 1 || !strings.Contains(r.Stdout, "Denied: denied by permission 1") {
		t.Fatalf("intention check -path /admin: exit %d: %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := a.CLI("intention", "check", "-path", "/public", "service-a", "service-b"); r.Code != 0 || !strings.Contains(r.Stdout, "Allowed") {
		t.Fatalf("intention check -path /public: exit %d: %q %q", r.Code, r.Stdout, r.Stderr)
	}
}
