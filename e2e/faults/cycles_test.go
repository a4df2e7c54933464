package faults

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// TestStartStopCyclesLeaveNothing starts and stops a bridge job with a
// mapped port again and again (cycleCount times) and checks that nothing
// of its allocations stays behind: namespaces, veths, iptables rules, IPAM
// leases, files under the data dir and agent goroutines.
func TestStartStopCyclesLeaveNothing(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	stateDir := filepath.Join(a.DataDir, "data")
	// One warm-up cycle: the bridge, the NAT rules and the agent's
	// long-lived goroutines exist from then on.
	ids := []string{runCycle(t, a)}
	baseGoroutines := metric(t, a, "go_goroutines")
	baseRSS := metric(t, a, "process_resident_memory_bytes")
	baseFiles := countFiles(t, stateDir)
	n := cycleCount()
	for i := 0; i < n; i++ {
		ids = append(ids, runCycle(t, a))
	}
	// The agent's HTTP clients and the terminated tasks' monitors wind
	// down asynchronously: give them a moment, then count.
	var goroutines float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		goroutines = metric(t, a, "go_goroutines")
		if goroutines <= baseGoroutines+5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rss := metric(t, a, "process_resident_memory_bytes")
	files := countFiles(t, stateDir)
	t.Logf("after %d cycles: goroutines %v (warm %v), RSS %.1f MiB (warm %.1f MiB), files under the data dir %d (warm %d)",
		n, goroutines, baseGoroutines, rss/(1<<20), baseRSS/(1<<20), files, baseFiles)
	left := leftovers(t, a, stateDir, ids)
	figure(t, "cycles", float64(n))
	for _, k := range leftoverKinds {
		figure(t, "left_"+k, float64(len(left[k])))
	}
	figure(t, "left_files", float64(files-baseFiles))
	figure(t, "goroutines_added", goroutines-baseGoroutines)
	figure(t, "rss_added_mib", (rss-baseRSS)/(1<<20))
	for _, k := range leftoverKinds {
		if len(left[k]) > 0 {
			t.Errorf("%d %s left behind after %d start/stop cycles:\n  %s", len(left[k]), k, len(ids), strings.Join(left[k], "\n  "))
		}
	}
	if files > baseFiles {
		t.Errorf("%d more files under the data dir than after the warm-up cycle", files-baseFiles)
	}
	if goroutines > baseGoroutines+5 {
		t.Errorf("agent goroutines grew from %v to %v over %d cycles", baseGoroutines, goroutines, n)
	}
}

// runCycle runs the sleeper job until its allocation runs, purges it and
// waits until the allocation is gone from the agent. It returns the
// allocation's ID.
func runCycle(t *testing.T, a *framework.Agent) string {
	t.Helper()
	r := a.CLI("job", "run", "input/sleeper.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d: %s %s", r.Code, r.Stdout, r.Stderr)
	}
	allocs := a.RunningAllocs("faults-sleeper", 1)
	id := allocs[0].ID
	a.MustCLI("job", "stop", "-purge", "faults-sleeper")
	a.Eventually(60*time.Second, "allocation "+id+" gone", func() bool {
		list, _, err := a.Nomad().Allocations().List(nil)
		if err != nil {
			return false
		}
		for _, al := range list {
			if al.ID == id {
				return false
			}
		}
		_, err = os.Stat(netnsPath(id))
		return os.IsNotExist(err)
	})
	return id
}

// leftoverKinds are the kinds of residue leftovers looks for.
var leftoverKinds = []string{"namespaces", "alloc_dirs", "veths", "iptables_rules", "ipam_leases"}

// leftovers lists, by kind, what the allocations ids left on the machine.
func leftovers(t *testing.T, a *framework.Agent, stateDir string, ids []string) map[string][]string {
	t.Helper()
	left := map[string][]string{}
	for _, id := range ids {
		if _, err := os.Stat(netnsPath(id)); err == nil {
			left["namespaces"] = append(left["namespaces"], netnsPath(id))
		}
		if _, err := os.Stat(filepath.Join(stateDir, "alloc", id)); err == nil {
			left["alloc_dirs"] = append(left["alloc_dirs"], filepath.Join(stateDir, "alloc", id))
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show", "master", a.Bridge).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show master %s: %v: %s", a.Bridge, err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			left["veths"] = append(left["veths"], l)
		}
	}
	ruleIDs := map[string]bool{}
	for _, id := range ids {
		ruleIDs[id] = true
	}
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.Command("iptables-save", "-t", table).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables-save -t %s: %v: %s", table, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for id := range ruleIDs {
				if strings.Contains(line, id) {
					left["iptables_rules"] = append(left["iptables_rules"], table+": "+line)
				}
			}
		}
	}
	left["ipam_leases"] = leases(t, filepath.Join(stateDir, "cni"))
	return left
}

// countFiles counts the regular files and sockets under dir.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	bounded := map[string]int{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		// The embedded etcd member's log segments and snapshots come and
		// go as it writes; etcd keeps at most etcdKeptFiles of each.
		if d := filepath.Dir(path); strings.HasSuffix(d, filepath.Join("member", "wal")) || strings.HasSuffix(d, filepath.Join("member", "snap")) {
			if bounded[d]++; bounded[d] > etcdKeptFiles {
				t.Errorf("%s holds more than %d files: etcd's retention is not applied", d, etcdKeptFiles)
			}
			return nil
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// etcdKeptFiles bounds the files of each of the member's wal/ and snap/
// dirs: etcd's 5 kept (MaxWalFiles, MaxSnapFiles), the database and a
// preallocated next segment.
const etcdKeptFiles = 7

// leases finds host-local lease files (named by IP address) under dir.
func leases(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if !info.IsDir() && strings.Count(info.Name(), ".") == 3 && !strings.HasPrefix(info.Name(), "last_reserved_ip") {
			if _, perr := strconv.Atoi(strings.Split(info.Name(), ".")[0]); perr == nil {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// metric reads one unlabelled value from the agent's /v1/metrics.
func metric(t *testing.T, a *framework.Agent, name string) float64 {
	t.Helper()
	resp, err := http.Get(a.HTTPAddr + "/v1/metrics")
	if err != nil {
		t.Fatalf("GET /v1/metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not in /v1/metrics", name)
	return 0
}
