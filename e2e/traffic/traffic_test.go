// Package traffic holds the end-to-end tests of L7 traffic management:
// config entries written with the CLI and the official consul/api client,
// compiled into the sidecars' routes, splits and retries, and L7
// intentions decided request by request.
package traffic

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
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

	// Promote v2 while requests flow: none fails, and once service-a's
	// sidecar holds the promoted route every request reaches v2.
	before := upstreamRequests(t, a, svcA.ID)
	var wg sync.WaitGroup
	var during map[string]int
	flowing := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(flowing)
		r := a.Exec(svcA.ID, "service-a", a.Bin, "demo-app", "get", "-timeout", "5s", "-n", "500", "-every", "10ms", upstream+"/")
		during = map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			during[line]++
		}
	}()
	a.Eventually(30*time.Second, "requests flowing through service-a's upstream", func() bool {
		return upstreamRequests(t, a, svcA.ID) >= before+20
	})
	if c := catchAllClusters(t, a, svcA.ID); !slices.ContainsFunc(c, isSubset("v1")) {
		t.Fatalf("before the promotion, service-a's sidecar routes / to %v; want a v1 split", c)
	}
	written := time.Now()
	a.MustCLI("config", "write", "../../config/canary/05-service-b-promote.json")
	a.Eventually(30*time.Second, "service-a's sidecar to route / to v2 alone", func() bool {
		c := catchAllClusters(t, a, svcA.ID)
		return len(c) > 0 && !slices.ContainsFunc(c, func(name string) bool { return !isSubset("v2")(name) })
	})
	t.Logf("the promotion reached service-a's sidecar %s after the write", time.Since(written).Round(time.Millisecond))
	select {
	case <-flowing:
		t.Fatal("the requests sent during the promotion ended before the sidecar had it: nothing was sent across the change")
	default:
	}
	if c := tally(t, a, svcA.ID, "/", 100); c["200 v2"] != 100 {
		t.Fatalf("with the promoted route in service-a's sidecar, 100 requests = %v; want all v2", c)
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

// adminGet fetches path from service-a's sidecar admin listener, inside
// its allocation.
func adminGet(t *testing.T, a *framework.Agent, allocID, path string) string {
	t.Helper()
	r := a.Exec(allocID, "service-a", a.Bin, "demo-app", "get", "-timeout", "5s", "http://127.0.0.2:19001"+path)
	if r.Code != 0 {
		t.Fatalf("sidecar admin %s: exit %d: %s", path, r.Code, r.Stderr)
	}
	return r.Stdout
}

// upstreamRequests sums the requests service-a's sidecar took on its
// upstream listeners (http.upstream.*.downstream_rq_total).
func upstreamRequests(t *testing.T, a *framework.Agent, allocID string) int {
	t.Helper()
	total := 0
	for _, line := range strings.Split(adminGet(t, a, allocID, "/stats?filter="+url.QueryEscape(`^http\.upstream\..*\.downstream_rq_total$`)), "\n") {
		_, v, ok := strings.Cut(line, ": ")
		if n, err := strconv.Atoi(strings.TrimSpace(v)); ok && err == nil {
			total += n
		}
	}
	return total
}

// isSubset matches the clusters of a service-b subset.
func isSubset(subset string) func(string) bool {
	return func(cluster string) bool { return strings.HasPrefix(cluster, subset+".service-b.") }
}

// catchAllClusters returns the clusters that the catch-all routes (prefix
// "/", no header match: the router's own and the default one after it) of
// service-a's sidecar send to, as its config_dump shows the route
// configuration it holds.
func catchAllClusters(t *testing.T, a *framework.Agent, allocID string) []string {
	t.Helper()
	var dump struct {
		Configs []struct {
			Type    string `json:"@type"`
			Dynamic []struct {
				RouteConfig struct {
					VirtualHosts []struct {
						Routes []struct {
							Match struct {
								Prefix  string            `json:"prefix"`
								Headers []json.RawMessage `json:"headers"`
							} `json:"match"`
							Route struct {
								Cluster  string `json:"cluster"`
								Weighted struct {
									Clusters []struct {
										Name string `json:"name"`
									} `json:"clusters"`
								} `json:"weighted_clusters"`
							} `json:"route"`
						} `json:"routes"`
					} `json:"virtual_hosts"`
				} `json:"route_config"`
			} `json:"dynamic_route_configs"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, a, allocID, "/config_dump")), &dump); err != nil {
		t.Fatalf("config_dump of service-a's sidecar: %v", err)
	}
	var out []string
	for _, c := range dump.Configs {
		for _, d := range c.Dynamic {
			for _, vh := range d.RouteConfig.VirtualHosts {
				for _, r := range vh.Routes {
					if r.Match.Prefix != "/" || len(r.Match.Headers) > 0 {
						continue
					}
					if r.Route.Cluster != "" {
						out = append(out, r.Route.Cluster)
					}
					for _, w := range r.Route.Weighted.Clusters {
						out = append(out, w.Name)
					}
				}
			}
		}
	}
	return out
}
