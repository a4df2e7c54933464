package cluster

import (
	"strings"
	"testing"
	"time"
)

// oneServerThreeClients starts server s1 (host .2) and clients c1-c3
// (hosts .5-.7) in parallel and waits until the three nodes are ready.
func oneServerThreeClients(t *testing.T) (*cluster, *agent, []*agent) {
	t.Helper()
	c := newCluster(t)
	start := time.Now()
	s1 := c.AddServer("s1", 2, 1)
	clients := []*agent{c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1), c.AddClient("c3", 7, s1)}
	c.WaitLeader(60*time.Second, s1)
	c.WaitNodesReady(60*time.Second, s1, clients...)
	figure(t, "cluster_1s3c_ready_seconds", time.Since(start))
	return c, s1, clients
}

// TestOneServerThreeClients places a job of six over three clients (two
// each) and a distinct_hosts job of four, whose fourth allocation cannot
// be placed.
func TestOneServerThreeClients(t *testing.T) {
	c, s1, clients := oneServerThreeClients(t)
	nodes, err := c.nodeStatus(s1)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("server lists %d nodes, want the 3 clients: %v", len(nodes), nodes)
	}

	c.RegisterJob(s1, sleepJob("spread6", 6, false))
	run, took := c.WaitRunning(s1, "spread6", 6, 60*time.Second)
	figure(t, "six_allocs_running_seconds", took)
	names := c.nodeNames(s1)
	counts := perNode(run, names)
	for _, cl := range clients {
		if counts[cl.Name] != 2 {
			t.Errorf("job spread6: %d allocations on %s, want 2 on each client: %v", counts[cl.Name], cl.Name, counts)
		}
	}

	evalID := c.RegisterJob(s1, sleepJob("distinct4", 4, true))
	ev := c.WaitEval(s1, evalID)
	run, _ = c.WaitRunning(s1, "distinct4", 3, 60*time.Second)
	if counts := perNode(run, names); len(counts) != 3 {
		t.Errorf("job distinct4: running allocations on %d nodes, want 3 distinct: %v", len(counts), counts)
	}
	if failed := failedConstraints(ev); !strings.Contains(failed, "distinct_hosts") {
		t.Errorf("evaluation %s of distinct4 (status %s): failed placements %q do not name distinct_hosts", evalID, ev.Status, failed)
	} else {
		t.Logf("distinct4's failed placement: %s", failed)
	}
	// Stays at three: the blocked fourth allocation has no node to go to,
	// even when the scheduler looks again with the three running (the
	// same job registered again is evaluated anew).
	again := c.RegisterJob(s1, sleepJob("distinct4", 4, true))
	if ev := c.WaitEval(s1, again); !strings.Contains(failedConstraints(ev), "distinct_hosts") {
		t.Errorf("evaluation %s of distinct4 with three running (status %s): failed placements %q do not name distinct_hosts",
			again, ev.Status, failedConstraints(ev))
	}
	all, err := c.allocs(s1, "distinct4")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(running(all)); n != 3 || len(all) != 3 {
		t.Errorf("job distinct4: %d allocations, %d running, after a second evaluation; want 3 running and no other: %s", len(all), n, describe(all))
	}
	out, err := c.CLI(s1, "job", "status", "distinct4")
	if err != nil || !strings.Contains(out, "distinct_hosts") {
		t.Errorf("`meshlet job status distinct4` does not name distinct_hosts (err %v):\n%s", err, out)
	}
	t.Logf("meshlet job status distinct4:\n%s", out)

	// A system job runs once on every client, whatever room the others
	// left, and job status shows its type.
	c.RegisterJob(s1, strings.Replace(sleepJob("everywhere", 1, false), `type        = "service"`, `type        = "system"`, 1))
	run, _ = c.WaitRunning(s1, "everywhere", 3, 60*time.Second)
	if counts := perNode(run, names); len(counts) != 3 || counts["c1"] != 1 || counts["c2"] != 1 || counts["c3"] != 1 {
		t.Errorf("system job: running allocations on %v, want one on each of the 3 clients", counts)
	}
	if out, err := c.CLI(s1, "job", "status", "everywhere"); err != nil || !strings.Contains(out, "system") {
		t.Errorf("`meshlet job status everywhere` does not show type system (err %v):\n%s", err, out)
	}
}
