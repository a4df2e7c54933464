// Package loadbalance holds the end-to-end tests of HTTP through the mesh
// with round robin over two instances, and of inspecting allocations and
// sidecars.
package loadbalance

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// callA asks service-a (from inside its allocation) for its merged answer.
func callA(a *framework.Agent, allocID string) framework.CLIResult {
	return a.Exec(allocID, "service-a", a.Bin, "demo-app", "get", "-timeout", "3s", "http://127.0.0.1:8080/")
}

func TestHTTPLoadBalancingAndDeny(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/hello.hcl")
	allocs := a.RunningAllocs(job, 3)
	svcA := a.AllocByGroup(allocs, "service-a")

	a.Eventually(30*time.Second, "service-a answering through the mesh", func() bool {
		return callA(a, svcA.ID).Code == 0
	})
	seen := map[string]int{}
	for i := 0; i < 4; i++ {
		r := callA(a, svcA.ID)
		if r.Code != 0 {
			t.Fatalf("request %d: exit %d: %s", i, r.Code, r.Stderr)
		}
		seen[strings.TrimSpace(r.Stdout)]++
	}
	if seen["a <- b-0"] == 0 || seen["a <- b-1"] == 0 {
		t.Fatalf("four requests did not reach both service-b instances: %v", seen)
	}

	a.MustCLI("intention", "create", "-deny", "service-a", "service-b")
	r := callA(a, svcA.ID)
	if r.Code == 0 || !strings.Contains(r.Stderr, "500") {
		t.Fatalf("with deny service-a -> service-b, service-a should answer 500; got exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

var cxTotal = regexp.MustCompile(`(?m)^service-b\.default\.dc1\.internal\.[^:]+::([0-9.]+):(\d+)::cx_total::(\d+)$`)

// clusterStats reads service-a's sidecar admin /clusters from inside the
// allocation and returns cx_total per service-b endpoint.
func clusterStats(t *testing.T, a *framework.Agent, allocID string) (map[string]int, string) {
	t.Helper()
	r := a.Exec(allocID, "service-a", a.Bin, "demo-app", "get", "http://127.0.0.2:19001/clusters")
	if r.Code != 0 {
		t.Fatalf("admin /clusters: exit %d: %s", r.Code, r.Stderr)
	}
	out := map[string]int{}
	for _, m := range cxTotal.FindAllStringSubmatch(r.Stdout, -1) {
		n, _ := strconv.Atoi(m[3])
		out[m[1]+":"+m[2]] = n
	}
	return out, r.Stdout
}

func TestInspection(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/hello.hcl")
	allocs := a.RunningAllocs(job, 3)
	svcA := a.AllocByGroup(allocs, "service-a")
	a.Eventually(30*time.Second, "service-a answering", func() bool { return callA(a, svcA.ID).Code == 0 })

	status := a.MustCLI("alloc", "status", svcA.ID[:8])
	for _, want := range []string{
		`Allocation Addresses (mode = "bridge")`, "connect-proxy-service-a",
		`Task "service-a" is "running"`, `Task "connect-proxy-service-a" (prestart sidecar) is "running"`,
		"Sidecar Proxy: built-in",
	} {
		if !strings.Contains(status, want) {
			t.Errorf("alloc status lacks %q:\n%s", want, status)
		}
	}
	if !regexp.MustCompile(`\d+\.\d+\.\d+\.\d+`).MatchString(status) {
		t.Errorf("alloc status shows no allocation address:\n%s", status)
	}

	before, raw := clusterStats(t, a, svcA.ID)
	if len(before) != 2 {
		t.Fatalf("/clusters lists %d service-b endpoints, want 2:\n%s", len(before), raw)
	}
	if !strings.Contains(raw, "::health_flags::healthy") {
		t.Errorf("/clusters shows no healthy endpoint:\n%s", raw)
	}
	for i := 0; i < 4; i++ {
		callA(a, svcA.ID)
	}
	after, raw := clusterStats(t, a, svcA.ID)
	total := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	if total(after) < total(before)+4 {
		t.Fatalf("cx_total did not grow with 4 requests: before %v after %v\n%s", before, after, raw)
	}
}
