package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/server"
)

// TestRacingPlansAcrossLeaders forces two servers to race plans for one
// job: the leader computes a plan (count 3) and is paused before its
// commit (a test hook), then frozen (SIGSTOP) past its leader lease; a new
// leader commits another update (count 4); the old leader wakes up and
// tries its stale commit. The stale plan must not land: the job stays at
// count 4 with exactly 4 allocations (no double placement, no lost update).
func TestRacingPlansAcrossLeaders(t *testing.T) {
	requireHA(t)
	hook := filepath.Join(t.TempDir(), "pause")
	t.Setenv(server.PlanPauseEnv, hook) // inherited by the agents
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 3)
	servers := []*agent{s1, c.AddServer("s2", 3, 3, s1), c.AddServer("s3", 4, 3, s1)}
	c1 := c.AddClient("c1", 5, servers...)
	leader, _ := c.WaitLeader(60*time.Second, servers...)
	c.WaitNodesReady(60*time.Second, s1, c1)
	c.RunJobCLI(s1, "racer", sleepJob("racer", 2, false))
	c.WaitRunning(s1, "racer", 2, 60*time.Second)

	old := byRPCAddr(t, servers, leader)
	var rest []*agent
	for _, s := range servers {
		if s != old {
			rest = append(rest, s)
		}
	}
	if err := os.WriteFile(hook, []byte("6s"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := make(chan error, 1)
	go func() { stale <- register(old, "racer", 3) }()
	// Freeze the leader only once its plan is computed and paused before
	// the commit (the hook logs it), so the stale commit is what is tested.
	poll(t, 20*time.Second, "the leader's plan paused by the test hook", func() (bool, string) {
		b, _ := os.ReadFile(old.LogPath)
		return strings.Contains(string(b), "test hook: pausing before a plan commit"), ""
	})
	if err := os.Remove(hook); err != nil {
		t.Fatal(err)
	}
	pid := old.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			_ = syscall.Kill(-pid, syscall.SIGCONT)
		}
	}()
	newLeader := waitNewLeader(t, 20*time.Second, leader, rest)
	t.Logf("leader %s (%s) frozen mid-plan; new leader %s", leader, old.Name, newLeader)
	if err := register(byRPCAddr(t, rest, newLeader), "racer", 4); err != nil {
		t.Fatalf("update through the new leader: %v", err)
	}
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	continued = true
	resumed := time.Now()
	select {
	case err := <-stale:
		t.Logf("the stale leader's update answered: %v", err)
		if err == nil {
			t.Error("the update planned by the deposed leader was accepted")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the stale leader's update never answered")
	}
	// The stale plan's pause ends at most 6 s after the resume; anything
	// its commit could have placed is visible 2 s later.
	time.Sleep(time.Until(resumed.Add(8 * time.Second)))
	via := rest[0]
	job, _, err := via.API().Jobs().Info("racer", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := *job.TaskGroups[0].Count; got != 4 {
		t.Errorf("job count = %d after the race, want the new leader's 4 (lost update)", got)
	}
	allocs, _ := c.WaitRunning(via, "racer", 4, 60*time.Second)
	names := map[string]int{}
	for _, a := range allocs {
		if a.DesiredStatus == "run" {
			names[a.Name]++
		}
	}
	for n, k := range names {
		if k > 1 {
			t.Errorf("allocation %s placed %d times", n, k)
		}
	}
	if len(names) != 4 { // a stale plan's extra placement would be a fifth name
		t.Errorf("allocations meant to run: %v, want racer.g[0] to racer.g[3]", names)
	}
}

// register updates job id to count through via's API.
func register(via *agent, id string, count int) error {
	job, err := via.API().Jobs().ParseHCL(sleepJob(id, count, false), true)
	if err != nil {
		return err
	}
	_, _, err = via.API().Jobs().Register(job, &nomadapi.WriteOptions{})
	return err
}
