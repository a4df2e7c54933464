package framework

import (
	"path/filepath"
	"sort"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/jobspecs"
)

// RunJob registers the jobspec at path (relative to the calling test's
// directory) through `meshlet job run` and waits until it runs. The job is
// purged in t.Cleanup.
func (a *Agent) RunJob(path string) string {
	a.t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		a.t.Fatal(err)
	}
	job, diags := jobspecs.ParseFile(abs, nil)
	if diags.HasErrors() {
		a.t.Fatalf("jobspec %s: %v", path, diags.Error())
	}
	id := job.ID
	r := a.CLI("job", "run", abs)
	if r.Code != 0 {
		a.t.Fatalf("meshlet job run %s: exit %d\nstdout: %s\nstderr: %s", path, r.Code, r.Stdout, r.Stderr)
	}
	a.t.Cleanup(func() { _ = a.CLI("job", "stop", "-purge", id) })
	return id
}

// RunningAllocs waits until job has want running allocations and returns
// them sorted by name (group, index).
func (a *Agent) RunningAllocs(jobID string, want int) []*nomadapi.AllocationListStub {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		allocs, _, err := a.Nomad().Jobs().Allocations(jobID, false, nil)
		var running []*nomadapi.AllocationListStub
		for _, al := range allocs {
			if al.ClientStatus == "running" && al.DesiredStatus == "run" {
				running = append(running, al)
			}
		}
		if err == nil && len(running) >= want {
			sort.Slice(running, func(i, j int) bool { return running[i].Name < running[j].Name })
			return running
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("job %s: %d of %d allocations running after 60s (err %v)", jobID, len(running), want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AllocByGroup returns the first running allocation of group.
func (a *Agent) AllocByGroup(allocs []*nomadapi.AllocationListStub, group string) *nomadapi.AllocationListStub {
	a.t.Helper()
	for _, al := range allocs {
		if al.TaskGroup == group {
			return al
		}
	}
	a.t.Fatalf("no running allocation of group %q", group)
	return nil
}

// Exec runs a command inside an allocation through `meshlet alloc exec`.
func (a *Agent) Exec(allocID, task string, cmd ...string) CLIResult {
	args := append([]string{"alloc", "exec", "-task", task, allocID}, cmd...)
	return a.CLI(args...)
}

// Eventually retries fn until it returns true or timeout passes.
func (a *Agent) Eventually(timeout time.Duration, what string, fn func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for !fn() {
		if time.Now().After(deadline) {
			a.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
