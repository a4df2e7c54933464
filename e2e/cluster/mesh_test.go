package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// meshJob is the seed walkthrough across nodes: service-a on the node
// named aNode reaches service-b (count 2, one per node among bNodes)
// through its upstream on 127.0.0.1:9000 inside its namespace.
func meshJob(aNode string, bNodes ...string) string {
	return fmt.Sprintf(`job "hello-mesh" {
  datacenters = ["dc1"]

  group "service-b" {
    count = 2

    constraint {
      attribute = "${node.unique.name}"
      operator  = "regexp"
      value     = "^(%s)$"
    }

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-path", "/hello_b", "-id", "b-${NOMAD_ALLOC_INDEX}"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }

  group "service-a" {
    constraint {
      attribute = "${node.unique.name}"
      value     = %q
    }

    network {
      mode = "bridge"
    }

    service {
      name = "service-a"
      port = "8080"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "service-b"
              local_bind_port  = 9000
            }
          }
        }
      }
    }

    task "service-a" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "a",
        "-upstream", "http://${NOMAD_UPSTREAM_ADDR_service_b}/hello_b"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`, strings.Join(bNodes, "|"), aNode)
}

// answers runs n requests (every apart) from inside service-a's
// allocation to service-a, which asks service-b through the mesh, and
// returns one entry per request: "b-0", "b-1" or "fail <line>".
func (c *cluster) answers(via *agent, allocID string, n int, every time.Duration) []string {
	c.t.Helper()
	out, err := c.CLI(via, "alloc", "exec", "-task", "service-a", allocID, c.bin, "demo-app", "get",
		"-timeout", "1s", "-n", fmt.Sprint(n), "-every", every.String(), "http://127.0.0.1:8080/")
	if err != nil {
		// The exec itself failed (e.g. the task is still starting right
		// after the allocation turned running): every request failed.
		line := "fail exec: " + strings.Join(strings.Fields(out), " ")
		res := make([]string, n)
		for i := range res {
			res[i] = line
		}
		return res
	}
	var res []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.HasPrefix(line, "200 a <- b-"):
			res = append(res, strings.TrimPrefix(line, "200 a <- "))
		default:
			res = append(res, "fail "+line)
		}
	}
	return res
}

// CLIOnHost runs the meshlet CLI inside host's network namespace, where
// the agent's connect API listens on 127.0.0.1:8500 (loopback only, as
// Consul's client_addr).
func (c *cluster) CLIOnHost(host *agent, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", host.NS, c.bin}, args...)...)
	cmd.Env = append(os.Environ(), "MESHLET_TOKEN="+c.token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("meshlet %s on %s: %w", strings.Join(args, " "), host.Name, err)
	}
	return string(out), err
}

func tally(res []string) map[string]int {
	out := map[string]int{}
	for _, r := range res {
		if strings.HasPrefix(r, "fail") {
			r = "fail"
		}
		out[r]++
	}
	return out
}

// TestCrossNodeMesh runs the seed walkthrough over three client nodes:
// round robin across nodes, a deny intention made through a client agent
// closing the path, the Consul-shaped catalog of one node listing the
// other nodes' instances, and a node's death moving every request to the
// surviving instance.
func TestCrossNodeMesh(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2, c3 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1), c.AddClient("c3", 7, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2, c3)

	c.RunJobCLI(s1, "hello-mesh", meshJob("c1", "c2", "c3"))
	allocs, _ := c.WaitRunning(s1, "hello-mesh", 3, 90*time.Second)
	names := c.nodeNames(s1)
	var aID string
	bOn := map[string]string{} // "b-N" -> node name
	for _, al := range allocs {
		node := names[al.NodeID]
		switch al.TaskGroup {
		case "service-a":
			aID = al.ID
			if node != "c1" {
				t.Fatalf("service-a placed on %s, want c1", node)
			}
		case "service-b":
			bOn["b-"+strings.TrimSuffix(strings.TrimPrefix(al.Name, "hello-mesh.service-b["), "]")] = node
		}
	}
	if bOn["b-0"] == bOn["b-1"] || bOn["b-0"] == "" {
		t.Fatalf("service-b instances not on two nodes: %v", bOn)
	}
	took := poll(t, 60*time.Second, "service-a answering through the mesh", func() (bool, string) {
		res := c.answers(s1, aID, 1, 0)
		return !strings.HasPrefix(res[0], "fail"), res[0]
	})
	figure(t, "first cross-node answer after the allocations ran", took)
	// service-b has no check: an instance takes traffic once its sidecar
	// listens, perhaps before its app does. Count from when both answer.
	seen := map[string]int{}
	poll(t, 30*time.Second, "both service-b instances answering", func() (bool, string) {
		for _, a := range c.answers(s1, aID, 2, 0) {
			seen[a]++
		}
		return seen["b-0"] > 0 && seen["b-1"] > 0, fmt.Sprint(seen)
	})

	res := tally(c.answers(s1, aID, 100, 10*time.Millisecond))
	if res["fail"] > 0 || res["b-0"] < 40 || res["b-1"] < 40 {
		t.Fatalf("100 requests across nodes: %v, want b-0 and b-1 at 50±10 each and no failure (instances on %v)", res, bOn)
	}
	t.Logf("100 requests across nodes: %v (instances on %v)", res, bOn)

	// alloc status shows where the sidecar is reachable: the node's
	// address and the mapped host port.
	if out, err := c.CLI(s1, "alloc", "status", aID); err != nil || !regexp.MustCompile(
		`connect-proxy-service-a\s+yes\s+`+regexp.QuoteMeta(c1.IP)+`:\d+ -> \d+`).MatchString(out) {
		t.Errorf("alloc status of service-a does not show its sidecar port on %s: %v\n%s", c1.IP, err, out)
	}
	checkRemoteCatalog(t, c1, bOn)
	checkDenyCrossNode(t, c, c1, s1, aID)
	checkNodeDeath(t, c, s1, c1, aID, bOn, map[string]*agent{"c2": c2, "c3": c3})
}

// checkRemoteCatalog reads c1's Consul-shaped API (127.0.0.1:8500 in its
// host namespace): service-b's instances on c2 and c3, named by node.
func checkRemoteCatalog(t *testing.T, c1 *agent, bOn map[string]string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", c1.NS, c1.argv[0], "demo-app", "get",
		withToken("http://127.0.0.1:8500/v1/health/connect/service-b", c1.token)).CombinedOutput()
	if err != nil {
		t.Fatalf("c1's /v1/health/connect/service-b: %v\n%s", err, out)
	}
	var entries []struct {
		Node    struct{ Node, Address string }
		Service struct {
			Address string
			Port    int
		}
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	nodes := map[string]bool{}
	for _, e := range entries {
		nodes[e.Node.Node] = true
		if e.Service.Address != e.Node.Address || e.Service.Port == 0 {
			t.Errorf("sidecar of service-b on %s registered at %s:%d, want the node's address %s and a host port",
				e.Node.Node, e.Service.Address, e.Service.Port, e.Node.Address)
		}
	}
	if len(entries) != 2 || !nodes[bOn["b-0"]] || !nodes[bOn["b-1"]] {
		t.Errorf("c1 lists service-b's sidecars on nodes %v, want %v:\n%s", nodes, bOn, out)
	}
}

// checkDenyCrossNode creates a deny intention through the client agent c1
// (forwarded to the servers) and measures how long until service-a's
// requests fail, then deletes it and waits for answers again.
func checkDenyCrossNode(t *testing.T, c *cluster, c1, via *agent, aID string) {
	t.Helper()
	if out, err := c.CLIOnHost(c1, "intention", "create", "-deny", "service-a", "service-b"); err != nil {
		t.Fatalf("intention create through c1: %v\n%s", err, out)
	}
	took := poll(t, 10*time.Second, "service-a failing under the deny intention", func() (bool, string) {
		res := c.answers(via, aID, 1, 0)
		return strings.HasPrefix(res[0], "fail"), res[0]
	})
	figure(t, "deny intention to a failing request across nodes (incl. one alloc exec)", took)
	if res := tally(c.answers(via, aID, 20, 10*time.Millisecond)); res["fail"] != 20 {
		t.Fatalf("with the deny intention, 20 requests gave %v, want 20 failures", res)
	}
	if out, err := c.CLIOnHost(c1, "intention", "delete", "service-a", "service-b"); err != nil {
		t.Fatalf("intention delete through c1: %v\n%s", err, out)
	}
	poll(t, 10*time.Second, "service-a answering after the deny was deleted", func() (bool, string) {
		res := c.answers(via, aID, 1, 0)
		return !strings.HasPrefix(res[0], "fail"), res[0]
	})
}

// checkNodeDeath SIGKILLs the node running b-1 during a bounded request
// loop (~50 rps) and checks that the tail of the loop all went to b-0.
func checkNodeDeath(t *testing.T, c *cluster, via, observer *agent, aID string, bOn map[string]string, clients map[string]*agent) {
	t.Helper()
	victim := clients[bOn["b-1"]]
	got := make(chan []string, 1)
	go func() { got <- c.answers(via, aID, 600, 20*time.Millisecond) }()
	time.Sleep(2 * time.Second)
	killed := time.Now()
	victim.Kill()
	// The dead node's instance leaves the other nodes' catalogs (and so
	// their proxies' EDS) once the leader marks it down: heartbeat TTL 2 s
	// plus grace 2 s in this harness, then at most a feed round trip.
	gone := poll(t, 20*time.Second, "the dead node's service-b instance leaving c1's catalog", func() (bool, string) {
		out, err := exec.Command("ip", "netns", "exec", observer.NS, observer.argv[0], "demo-app", "get",
			withToken("http://127.0.0.1:8500/v1/health/connect/service-b", observer.token)).CombinedOutput()
		return err == nil && !strings.Contains(string(out), `"`+victim.Name+`"`), string(out)
	})
	figure(t, "node SIGKILL to its instances leaving another node's catalog (TTL 2s + grace 2s)", time.Since(killed))
	if gone > 7*time.Second {
		t.Errorf("the dead node's instance left the other nodes' catalogs %s after the kill, want within TTL+grace+1s (5s) plus polling", gone)
	}
	var res []string
	select {
	case res = <-got:
	case <-time.After(90 * time.Second):
		t.Fatal("the request loop did not end")
	}
	last := -1 // the last request not answered by b-0
	for i, r := range res {
		if r != "b-0" {
			last = i
		}
	}
	if len(res) < 400 || last > len(res)-100 {
		t.Fatalf("after killing %s, the last %d requests were not all answered by b-0 (last other answer at %d of %d): %v",
			victim.Name, len(res)-last-1, last, len(res), tally(res))
	}
	failed := tally(res)["fail"]
	t.Logf("killed %s (b-1) at %s; %d of %d requests failed meanwhile: %v", victim.Name, killed.Format(time.RFC3339Nano), failed, len(res), tally(res))
	nomadAllocs(t, via)
}

func nomadAllocs(t *testing.T, via *agent) {
	t.Helper()
	allocs, _, err := via.API().Allocations().List(&nomadapi.QueryOptions{})
	if err != nil {
		t.Logf("list allocations: %v", err)
		return
	}
	for _, a := range allocs {
		t.Logf("alloc %s %s on %s: %s", a.ID[:8], a.Name, a.NodeName, a.ClientStatus)
	}
}
