// Package grpc holds the end-to-end tests of gRPC through the built-in
// proxy: h2c between apps and their sidecars, h2 over mTLS between
// sidecars, routing and splitting per call on one multiplexed connection,
// and grpc checks through a sidecar's expose listener.
package grpc

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

const (
	jobspec  = "../../jobspecs/grpc.hcl"
	upstream = "127.0.0.1:9000"
	// admin is every sidecar's admin address inside its namespace.
	admin = "http://127.0.0.2:19001"
)

// calls runs `demo-app grpc-get -n n` (n calls over one connection) from
// service-a's allocation to its upstream and counts the lines ("OK v1",
// "error Unavailable").
func calls(t *testing.T, a *framework.Agent, allocID string, n int) map[string]int {
	t.Helper()
	r := a.Exec(allocID, "service-a", a.Bin, "demo-app", "grpc-get", "-timeout", "5s", "-n", fmt.Sprint(n), upstream)
	if r.Code != 0 {
		t.Fatalf("grpc-get -n %d: exit %d: %s", n, r.Code, r.Stderr)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		out[line]++
	}
	return out
}

var statLine = regexp.MustCompile(`^(\S+): (-?\d+)$`)

// stats reads the sidecar stats of an allocation (through its task) whose
// names match filter.
func stats(t *testing.T, a *framework.Agent, allocID, task, filter string) map[string]int64 {
	t.Helper()
	r := a.Exec(allocID, task, a.Bin, "demo-app", "get", admin+"/stats?filter="+filter)
	if r.Code != 0 {
		t.Fatalf("sidecar stats of %s: exit %d: %s", task, r.Code, r.Stderr)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if m := statLine.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			out[m[1]] = v
		}
	}
	return out
}

// sum adds the stats whose names end with suffix.
func sum(s map[string]int64, suffix string) int64 {
	var n int64
	for k, v := range s {
		if strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// connStats are the connection and request counters of one call path:
// service-a's upstream listener and grpc-b clusters, and each grpc-b
// sidecar's local app cluster.
type connStats struct {
	aListenerCx, aClusterCx, aClusterRq int64
	bLocalCx, bLocalRq                  int64
}

func readConnStats(t *testing.T, a *framework.Agent, svcA string, bs []string) connStats {
	t.Helper()
	as := stats(t, a, svcA, "service-a", `listener\.127\.0\.0\.1_9000\.downstream_cx_total|grpc-b.*upstream_(cx|rq)_total`)
	s := connStats{
		aListenerCx: sum(as, "listener.127.0.0.1_9000.downstream_cx_total"),
		aClusterCx:  sum(as, ".upstream_cx_total"),
		aClusterRq:  sum(as, ".upstream_rq_total"),
	}
	for _, b := range bs {
		bst := stats(t, a, b, "grpc-b", `^cluster\.local_app\.upstream_(cx|rq)_total`)
		s.bLocalCx += bst["cluster.local_app.upstream_cx_total"]
		s.bLocalRq += bst["cluster.local_app.upstream_rq_total"]
	}
	return s
}

// TestGRPCThroughTheMesh: with service-defaults Protocol = "grpc", 200
// gRPC calls on one client connection go through service-a's sidecar
// (h2c), one h2 connection over mTLS per grpc-b instance and grpc-b's
// sidecar (h2c to the app), all succeed, and are balanced per call over
// v1 and v2. A resolver with subsets and a 50/50 splitter then split the
// calls of that one connection by version.
func TestGRPCThroughTheMesh(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob(jobspec)
	allocs := a.RunningAllocs(job, 3)
	svcA := a.AllocByGroup(allocs, "service-a").ID
	bs := []string{a.AllocByGroup(allocs, "grpc-b-v1").ID, a.AllocByGroup(allocs, "grpc-b-v2").ID}

	// Over TCP (no protocol yet), the one connection reaches one
	// instance: every call answers the same version.
	var last map[string]int
	a.Eventually(30*time.Second, "grpc-b answering over TCP", func() bool {
		last = calls(t, a, svcA, 20)
		return last["OK v1"] == 20 || last["OK v2"] == 20
	})
	t.Logf("20 calls over TCP: %v", last)

	r := a.CLIStdin([]byte("Kind = \"service-defaults\"\nName = \"grpc-b\"\nProtocol = \"grpc\"\n"), "config", "write", "-")
	if r.Code != 0 {
		t.Fatalf("config write service-defaults: exit %d: %s %s", r.Code, r.Stdout, r.Stderr)
	}
	// Once the sidecars speak gRPC, one connection's calls reach both.
	a.Eventually(30*time.Second, "one connection's calls balanced over v1 and v2", func() bool {
		last = calls(t, a, svcA, 20)
		return last["OK v1"] > 0 && last["OK v2"] > 0 && last["OK v1"]+last["OK v2"] == 20
	})

	before := readConnStats(t, a, svcA, bs)
	c := calls(t, a, svcA, 200)
	after := readConnStats(t, a, svcA, bs)
	t.Logf("200 calls: %v; stats before %+v after %+v", c, before, after)
	if c["OK v1"]+c["OK v2"] != 200 || c["OK v1"] < 60 || c["OK v2"] < 60 {
		t.Fatalf("200 calls = %v; want all OK, round robin over v1 and v2", c)
	}
	if d := after.aListenerCx - before.aListenerCx; d != 1 {
		t.Errorf("service-a's upstream listener accepted %d connections for one grpc-get, want 1", d)
	}
	if d := after.aClusterRq - before.aClusterRq; d != 200 {
		t.Errorf("service-a's grpc-b cluster counted %d requests, want 200 (one per call)", d)
	}
	// At most one new h2 connection per instance (0 when the pooled ones
	// from the earlier calls are still open), on both sides.
	if d := after.aClusterCx - before.aClusterCx; d > 2 {
		t.Errorf("service-a's sidecar opened %d connections to grpc-b for 200 calls, want <= 2 (one multiplexed per instance)", d)
	}
	if d := after.bLocalCx - before.bLocalCx; d > 2 {
		t.Errorf("grpc-b's sidecars opened %d connections to their apps for 200 calls, want <= 2", d)
	}
	if d := after.bLocalRq - before.bLocalRq; d != 200 {
		t.Errorf("grpc-b's sidecars forwarded %d requests to their apps, want 200", d)
	}

	// Subsets by version: first all to v1, then 50/50 per call.
	cc := a.Consul()
	resolver := &consulapi.ServiceResolverConfigEntry{
		Kind: consulapi.ServiceResolver, Name: "grpc-b", DefaultSubset: "v1",
		Subsets: map[string]consulapi.ServiceResolverSubset{
			"v1": {Filter: "Service.Meta.version == v1"},
			"v2": {Filter: "Service.Meta.version == v2"},
		},
	}
	if _, _, err := cc.ConfigEntries().Set(resolver, nil); err != nil {
		t.Fatalf("official client Set resolver: %v", err)
	}
	a.Eventually(10*time.Second, "all calls to the default subset v1", func() bool {
		last = calls(t, a, svcA, 20)
		return last["OK v1"] == 20
	})
	splitter := &consulapi.ServiceSplitterConfigEntry{
		Kind: consulapi.ServiceSplitter, Name: "grpc-b",
		Splits: []consulapi.ServiceSplit{{Weight: 50, ServiceSubset: "v1"}, {Weight: 50, ServiceSubset: "v2"}},
	}
	if _, _, err := cc.ConfigEntries().Set(splitter, nil); err != nil {
		t.Fatalf("official client Set splitter: %v", err)
	}
	a.Eventually(10*time.Second, "the 50/50 split reaching v2", func() bool {
		last = calls(t, a, svcA, 20)
		return last["OK v2"] > 0
	})
	c = calls(t, a, svcA, 400)
	t.Logf("400 calls split 50/50: %v", c)
	if c["OK v1"]+c["OK v2"] != 400 || c["OK v1"] < 140 || c["OK v2"] < 140 {
		t.Fatalf("400 calls on one connection = %v; want all OK, split about 200/200", c)
	}
	sub := stats(t, a, svcA, "service-a", `grpc-b.*upstream_rq_total`)
	var v1, v2 bool
	for name, n := range sub {
		v1 = v1 || (strings.Contains(name, "v1.grpc-b") && n > 0)
		v2 = v2 || (strings.Contains(name, "v2.grpc-b") && n > 0)
	}
	if !v1 || !v2 {
		t.Errorf("service-a's sidecar stats lack requests on per-subset clusters: %v", sub)
	}

	// A router matches the gRPC method by its path.
	router := &consulapi.ServiceRouterConfigEntry{
		Kind: consulapi.ServiceRouter, Name: "grpc-b",
		Routes: []consulapi.ServiceRoute{{
			Match:       &consulapi.ServiceRouteMatch{HTTP: &consulapi.ServiceRouteHTTPMatch{PathPrefix: "/grpc.health.v1.Health/"}},
			Destination: &consulapi.ServiceRouteDestination{ServiceSubset: "v2"},
		}},
	}
	if _, _, err := cc.ConfigEntries().Set(router, nil); err != nil {
		t.Fatalf("official client Set router: %v", err)
	}
	a.Eventually(10*time.Second, "the Health method routed to v2", func() bool {
		last = calls(t, a, svcA, 20)
		return last["OK v2"] == 20
	})
}
