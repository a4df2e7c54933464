package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestThreeServers forms a three-server cluster (s2 and s3 join through
// s1), SIGKILLs the leader, expects a new one within 10s and a job to run
// through a survivor, then restarts the killed server and expects three
// members again.
func TestThreeServers(t *testing.T) {
	requireHA(t)
	c := newCluster(t)
	start := time.Now()
	s1 := c.AddServer("s1", 2, 3)
	servers := []*agent{s1, c.AddServer("s2", 3, 3, s1), c.AddServer("s3", 4, 3, s1)}
	c1 := c.AddClient("c1", 5, servers...)
	leader, _ := c.WaitLeader(60*time.Second, servers...)
	figure(t, "three_servers_leader_seconds", time.Since(start))
	waitMembers(t, c, servers[1], servers)
	c.WaitNodesReady(60*time.Second, s1, c1)

	dead := byRPCAddr(t, servers, leader)
	var rest []*agent
	for _, s := range servers {
		if s != dead {
			rest = append(rest, s)
		}
	}
	killed := time.Now()
	dead.Kill()
	newLeader := waitNewLeader(t, 10*time.Second, leader, rest)
	figure(t, "leader_kill_to_new_leader_seconds", time.Since(killed))
	t.Logf("leader %s (%s) killed; new leader %s", leader, dead.Name, newLeader)

	// Through the follower: it forwards the write to the new leader.
	follower := rest[0]
	if follower.RPCAddr() == newLeader {
		follower = rest[1]
	}
	c.RunJobCLI(follower, "ha1", sleepJob("ha1", 1, false))
	_, took := c.WaitRunning(follower, "ha1", 1, 60*time.Second)
	figure(t, "job_run_after_failover_seconds", took)

	// A snapshot saved and restored through a follower (the restore is
	// forwarded to the leader).
	snap := filepath.Join(t.TempDir(), "backup.snap")
	if out, err := c.CLI(follower, "operator", "snapshot", "save", snap); err != nil {
		t.Fatalf("snapshot save through a follower: %v\n%s", err, out)
	}
	if out, err := c.CLI(follower, "operator", "snapshot", "restore", snap); err != nil {
		t.Errorf("snapshot restore through a follower: %v\n%s", err, out)
	}

	restarted := time.Now()
	dead.Start()
	c.WaitLeader(60*time.Second, servers...)
	waitMembers(t, c, rest[0], servers)
	figure(t, "killed_server_restart_to_member_seconds", time.Since(restarted))
}

func byRPCAddr(t *testing.T, servers []*agent, addr string) *agent {
	t.Helper()
	for _, s := range servers {
		if s.RPCAddr() == addr {
			return s
		}
	}
	t.Fatalf("leader %q is none of the servers' RPC addresses", addr)
	return nil
}

// waitNewLeader waits until every one of servers names the same leader,
// other than old.
func waitNewLeader(t *testing.T, timeout time.Duration, old string, servers []*agent) string {
	t.Helper()
	var leader string
	poll(t, timeout, "a new leader", func() (bool, string) {
		leader = ""
		for _, s := range servers {
			s.checkAlive()
			l, err := s.Leader()
			switch {
			case err != nil:
				return false, fmt.Sprintf("%s: %v", s.Name, err)
			case l == "" || l == old:
				return false, fmt.Sprintf("%s says leader %q", s.Name, l)
			case leader != "" && l != leader:
				return false, fmt.Sprintf("%s says %s, another server %s", s.Name, l, leader)
			}
			leader = l
		}
		return true, ""
	})
	return leader
}

// waitMembers waits until `meshlet server members` against via lists
// exactly the servers, each alive.
func waitMembers(t *testing.T, c *cluster, via *agent, servers []*agent) {
	t.Helper()
	poll(t, 60*time.Second, "server members to list the servers alive", func() (bool, string) {
		via.checkAlive()
		out, err := c.CLI(via, "server", "members")
		if strings.Contains(out, "unknown command") {
			t.Fatalf("`meshlet server members` is not a command of this binary:\n%s", out)
		}
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return membersAlive(out, servers)
	})
}

// membersAlive checks a members table: a header, then one line per
// server (found by address or name) that says alive.
func membersAlive(out string, servers []*agent) (bool, string) {
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			rows = append(rows, l)
		}
	}
	if len(rows) > 0 && strings.Contains(rows[0], "Name") {
		rows = rows[1:]
	}
	if len(rows) != len(servers) {
		return false, fmt.Sprintf("%d members, want %d:\n%s", len(rows), len(servers), out)
	}
	for _, s := range servers {
		found := false
		for _, r := range rows {
			f := strings.Fields(r)
			if len(f) > 0 && (strings.Contains(r, s.IP+" ") || strings.Contains(r, s.IP+":") || f[0] == s.Name || strings.HasPrefix(f[0], s.Name+".")) {
				found = strings.Contains(r, "alive")
			}
		}
		if !found {
			return false, fmt.Sprintf("no alive member %s (%s):\n%s", s.Name, s.IP, out)
		}
	}
	return true, ""
}
