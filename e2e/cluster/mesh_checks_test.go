package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFailingCheckLeavesRoundRobinAcrossNodes: service-b's two instances
// (on c2 and c3) have an http check; when the one on c3 fails it, the
// client agent there marks it critical and every proxy (service-a's on c1)
// stops sending it traffic; when it passes again it is back in the round
// robin. The Consul-shaped health API on another node shows the check.
func TestFailingCheckLeavesRoundRobinAcrossNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2, c3 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1), c.AddClient("c3", 7, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2, c3)
	job := strings.Replace(meshJob("c1", "c2", "c3"), `      name = "service-b"
      port = "9001"
`, `      name = "service-b"
      port = "9001"

      check {
        name     = "hello-health"
        type     = "http"
        path     = "/health"
        interval = "1s"
        timeout  = "1s"
      }
`, 1)
	job = strings.Replace(job, `"-id", "b-${NOMAD_ALLOC_INDEX}"]`, `"-id", "b-${NOMAD_ALLOC_INDEX}", "-unhealthy-file", "${NOMAD_ALLOC_DIR}/unhealthy"]`, 1)
	if !strings.Contains(job, "hello-health") || !strings.Contains(job, "-unhealthy-file") {
		t.Fatal("meshJob changed: the check could not be added")
	}
	c.RunJobCLI(s1, "hello-mesh", job)
	allocs, _ := c.WaitRunning(s1, "hello-mesh", 3, 90*time.Second)
	names := c.nodeNames(s1)
	agents := map[string]*agent{"c2": c2, "c3": c3}
	var aID, bOnC3, victim string
	for _, al := range allocs {
		switch {
		case al.TaskGroup == "service-a":
			aID = al.ID
		case names[al.NodeID] == "c3":
			// its answers name it b-<index>: "hello-mesh.service-b[N]"
			bOnC3, victim = al.ID, "b-"+strings.TrimSuffix(strings.TrimPrefix(al.Name, "hello-mesh.service-b["), "]")
		}
	}
	if aID == "" || bOnC3 == "" {
		t.Fatalf("placement: service-a %q, service-b on c3 %q", aID, bOnC3)
	}
	poll(t, 60*time.Second, "both service-b instances answering", func() (bool, string) {
		res := tally(c.answers(s1, aID, 20, 0))
		return res["b-0"] > 0 && res["b-1"] > 0 && res["fail"] == 0, ""
	})

	flag := filepath.Join(agents["c3"].DataDir, "alloc", bOnC3, "alloc", "unhealthy")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	took := poll(t, 20*time.Second, "the failing instance (on c3) out of service-a's round robin", func() (bool, string) {
		res := c.answers(s1, aID, 20, 0)
		seen := tally(res)
		return seen[victim] == 0 && seen["fail"] == 0 && len(seen) == 1, strings.Join(res, ",")
	})
	figure(t, "http check failing to its instance out of another node's round robin (interval 1s)", took)
	if took > 4*time.Second {
		t.Errorf("the failing instance left the round robin after %s, want within interval (1s) + 1s plus polling", took)
	}
	t.Logf("instance %s (on c3) out %s after its check started failing at %s", victim, took, failed.Format(time.RFC3339Nano))
	checkCriticalShown(t, c, s1, c1, bOnC3)

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	poll(t, 20*time.Second, "the instance back in the round robin", func() (bool, string) {
		seen := tally(c.answers(s1, aID, 20, 0))
		return seen[victim] > 0 && seen["fail"] == 0, ""
	})
}

// exec1 GETs url inside host's network namespace (its agent's local APIs).
func exec1(host *agent, url string) (string, error) {
	out, err := runIn(host.NS, host.argv[0], "demo-app", "get", withToken(url, host.token))
	return out, err
}

// runIn runs argv inside network namespace ns and returns its output.
func runIn(ns string, argv ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
	return string(out), err
}

// checkCriticalShown: the critical check is visible on another node's
// Consul-shaped health API, through the server's Nomad API (forwarded to
// the allocation's node) and in alloc status.
func checkCriticalShown(t *testing.T, c *cluster, s1, c1 *agent, allocID string) {
	t.Helper()
	out, err := exec1(c1, "http://127.0.0.1:8500/v1/health/service/service-b")
	if err != nil || !strings.Contains(out, `"hello-health"`) || !strings.Contains(out, `"critical"`) {
		t.Errorf("c1's health API does not show the critical check: %v\n%s", err, out)
	}
	out, _ = exec1(c1, "http://127.0.0.1:8500/v1/health/service/service-b?passing")
	var passing []struct{ Service struct{ ID string } }
	if err := json.Unmarshal([]byte(out), &passing); err != nil || len(passing) != 1 || strings.Contains(passing[0].Service.ID, allocID) {
		t.Errorf("?passing = %+v (%v), want only the healthy instance, not allocation %s's", passing, err, allocID)
	}
	// The official client reads the checks through the server, which
	// forwards to c3's agent; alloc status shows them.
	st, err := s1.API().Allocations().Checks(allocID, nil)
	if err != nil || len(st) != 2 {
		t.Errorf("Allocations().Checks through the server: %v, %+v (want the http check and the sidecar's)", err, st)
	}
	for _, cs := range st {
		if cs.Check == "hello-health" && cs.Status != "critical" {
			t.Errorf("check %s is %s, want critical", cs.Check, cs.Status)
		}
	}
	if out, err := c.CLI(s1, "alloc", "status", allocID); err != nil || !strings.Contains(out, "Service Checks:") ||
		!strings.Contains(out, "hello-health") || !strings.Contains(out, "critical") {
		t.Errorf("alloc status does not show the critical check: %v\n%s", err, out)
	}

}
