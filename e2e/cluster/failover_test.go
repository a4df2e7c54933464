package cluster

import (
	"fmt"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestClientDeathReplacesAllocations SIGKILLs a client: the server marks
// its node down, its allocations lost and places replacements on the
// other clients. The client then comes back on the same data dir: its old
// allocations stay stopped, their tasks (if they survived) are stopped,
// and the job runs exactly count allocations, each one process.
func TestClientDeathReplacesAllocations(t *testing.T) {
	const job, count = "lose6", 6
	c, s1, clients := oneServerThreeClients(t)
	c.RegisterJob(s1, sleepJob(job, count, false))
	run, _ := c.WaitRunning(s1, job, count, 60*time.Second)

	victim := clients[0]
	victimID := nodeID(t, c.nodeNames(s1), victim.Name)
	var old []string
	for _, a := range run {
		if a.NodeID == victimID {
			old = append(old, a.ID)
		}
	}
	if len(old) == 0 {
		t.Fatalf("no allocation of %s on %s to lose: %s", job, victim.Name, describe(run))
	}
	for _, id := range old {
		if len(taskPIDs(id)) == 0 {
			t.Errorf("allocation %s runs no /bin/sleep process on this machine", id)
		}
	}

	killed := time.Now()
	victim.Kill()
	survivors := 0
	for _, id := range old {
		survivors += len(taskPIDs(id))
	}
	t.Logf("%d of %d old task processes survived SIGKILL of %s's process group", survivors, len(old), victim.Name)

	poll(t, 30*time.Second, "node "+victim.Name+" down", func() (bool, string) {
		s1.checkAlive()
		st, err := c.nodeStatus(s1)
		if err != nil {
			return false, err.Error()
		}
		return st[victim.Name] == "down", fmt.Sprintf("nodes %v", st)
	})
	figure(t, "client_kill_to_node_down_seconds", time.Since(killed))
	waitReplaced(t, c, s1, job, count, victimID, old)
	figure(t, "client_kill_to_replacements_running_seconds", time.Since(killed))

	victim.Start()
	figure(t, "client_restart_to_ready_seconds", c.WaitNodesReady(60*time.Second, s1, victim))
	checkReturn(t, c, s1, victim, job, count, old)
}

func nodeID(t *testing.T, names map[string]string, name string) string {
	t.Helper()
	for id, n := range names {
		if n == name {
			return id
		}
	}
	t.Fatalf("no node named %s in %v", name, names)
	return ""
}

// waitReplaced waits until the old allocations are lost (desired stop)
// and count others run, none on the dead node.
func waitReplaced(t *testing.T, c *cluster, via *agent, job string, count int, deadNode string, old []string) {
	t.Helper()
	poll(t, 60*time.Second, "lost allocations replaced", func() (bool, string) {
		via.checkAlive()
		all, err := c.allocs(via, job)
		if err != nil {
			return false, err.Error()
		}
		byID := index(all)
		for _, id := range old {
			if a := byID[id]; a == nil || a.ClientStatus != "lost" || a.DesiredStatus != "stop" {
				return false, "old allocation " + id + " not lost and stopped: " + describe(all)
			}
		}
		run := running(all)
		for _, a := range run {
			if a.NodeID == deadNode {
				return false, "an allocation runs on the dead node: " + describe(all)
			}
		}
		return len(run) == count, describe(all)
	})
}

// checkReturn checks the cluster after the dead client came back: within
// 30s its old tasks are gone, and then (and all along) the old
// allocations are desired stop and exactly count allocations run, with
// distinct names and one task process each.
func checkReturn(t *testing.T, c *cluster, via, returned *agent, job string, count int, old []string) {
	t.Helper()
	var all []*nomadapi.AllocationListStub
	took := poll(t, 30*time.Second, "the returning client to stop its old tasks", func() (bool, string) {
		via.checkAlive()
		returned.checkAlive()
		var err error
		if all, err = c.allocs(via, job); err != nil {
			return false, err.Error()
		}
		byID := index(all)
		for _, id := range old {
			if a := byID[id]; a != nil && a.DesiredStatus != "stop" {
				t.Fatalf("old allocation %s is desired %s again after its client returned: %s", id, a.DesiredStatus, describe(all))
			}
			if pids := taskPIDs(id); len(pids) > 0 {
				return false, fmt.Sprintf("old allocation %s still has processes %v", id, pids)
			}
		}
		return true, ""
	})
	figure(t, "client_restart_old_tasks_stopped_seconds", took)
	all = waitReported(t, c, via, returned, job, old)
	names := map[string]bool{}
	runningAny := 0
	for _, a := range all {
		if a.ClientStatus != "running" {
			continue
		}
		runningAny++
		names[a.Name] = true
		if a.DesiredStatus != "run" {
			t.Errorf("allocation %s (%s) reports running but is desired %s", a.ID, a.Name, a.DesiredStatus)
		}
		if pids := taskPIDs(a.ID); len(pids) != 1 {
			t.Errorf("allocation %s (%s) has %d task processes %v, want 1", a.ID, a.Name, len(pids), pids)
		}
	}
	if runningAny != count || len(names) != count {
		t.Errorf("job %s: %d allocations report running under %d names, want %d: %s", job, runningAny, len(names), count, describe(all))
	}
}

// waitReported waits until the returning client has reported each old
// allocation it restored: the servers marked them lost, and only that
// client changes their client status, to the terminal one its runner
// ends with (its last report of them). A duplicate would show up as
// running before then, and counting earlier could miss it.
func waitReported(t *testing.T, c *cluster, via, returned *agent, job string, old []string) []*nomadapi.AllocationListStub {
	t.Helper()
	var all []*nomadapi.AllocationListStub
	took := poll(t, 30*time.Second, "the returning client to report its old allocations", func() (bool, string) {
		via.checkAlive()
		returned.checkAlive()
		var err error
		if all, err = c.allocs(via, job); err != nil {
			return false, err.Error()
		}
		byID := index(all)
		for _, id := range old {
			a := byID[id]
			if a == nil {
				return false, "old allocation " + id + " is gone: " + describe(all)
			}
			// "lost" is the servers' word, not the client's.
			if a.ClientStatus != "complete" && a.ClientStatus != "failed" {
				return false, "old allocation " + id + " not reported terminal by its client: " + describe(all)
			}
		}
		return true, ""
	})
	t.Logf("the returning client reported its old allocations after %s: %s", took.Round(time.Millisecond), describe(all))
	return all
}

func index(allocs []*nomadapi.AllocationListStub) map[string]*nomadapi.AllocationListStub {
	out := make(map[string]*nomadapi.AllocationListStub, len(allocs))
	for _, a := range allocs {
		out[a.ID] = a
	}
	return out
}
