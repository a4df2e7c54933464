package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// sleepJob is a service job of count raw_exec /bin/sleep tasks (host
// network, the default); distinct adds a job-level distinct_hosts constraint.
func sleepJob(id string, count int, distinct bool) string {
	constraint := ""
	if distinct {
		constraint = `
  constraint {
    operator = "distinct_hosts"
    value    = "true"
  }
`
	}
	return fmt.Sprintf(`job %q {
  datacenters = ["dc1"]
  type        = "service"
%s
  group "g" {
    count = %d

    task "sleep" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`, id, constraint, count)
}

// RegisterJob parses src on via's /v1/jobs/parse and registers it,
// returning the evaluation's ID.
func (c *cluster) RegisterJob(via *agent, src string) string {
	c.t.Helper()
	job, err := via.API().Jobs().ParseHCL(src, true)
	if err != nil {
		c.t.Fatalf("parse job through %s: %v", via.Name, err)
	}
	resp, _, err := via.API().Jobs().Register(job, nil)
	if err != nil {
		c.t.Fatalf("register job %s through %s: %v", *job.ID, via.Name, err)
	}
	return resp.EvalID
}

// RunJobCLI registers src through `meshlet job run -detach` against via.
func (c *cluster) RunJobCLI(via *agent, id, src string) {
	c.t.Helper()
	path := filepath.Join(c.certDir, id+".hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		c.t.Fatal(err)
	}
	if out, err := c.CLI(via, "job", "run", "-detach", path); err != nil {
		c.t.Fatalf("%v\n%s", err, out)
	}
}

// WaitEval waits until evaluation id is no longer pending and returns it.
func (c *cluster) WaitEval(via *agent, id string) *nomadapi.Evaluation {
	c.t.Helper()
	var ev *nomadapi.Evaluation
	poll(c.t, 30*time.Second, "evaluation "+id+" to finish", func() (bool, string) {
		via.checkAlive()
		var err error
		ev, _, err = via.API().Evaluations().Info(id, nil)
		if err != nil {
			return false, err.Error()
		}
		return ev.Status != "pending", "status " + ev.Status
	})
	return ev
}

// allocs lists job's allocations through via.
func (c *cluster) allocs(via *agent, jobID string) ([]*nomadapi.AllocationListStub, error) {
	allocs, _, err := via.API().Jobs().Allocations(jobID, true, nil)
	return allocs, err
}

// running are the allocations that run and should: client status running
// and desired status run.
func running(allocs []*nomadapi.AllocationListStub) []*nomadapi.AllocationListStub {
	var out []*nomadapi.AllocationListStub
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WaitRunning waits until exactly want allocations of job run, and every
// other allocation is terminal on the client, and returns the running
// ones.
func (c *cluster) WaitRunning(via *agent, jobID string, want int, timeout time.Duration) ([]*nomadapi.AllocationListStub, time.Duration) {
	c.t.Helper()
	var run []*nomadapi.AllocationListStub
	took := poll(c.t, timeout, fmt.Sprintf("%d running allocations of %s", want, jobID), func() (bool, string) {
		via.checkAlive()
		all, err := c.allocs(via, jobID)
		if err != nil {
			return false, err.Error()
		}
		run = running(all)
		return len(run) == want, describe(all)
	})
	return run, took
}

// perNode counts allocations by node name.
func perNode(allocs []*nomadapi.AllocationListStub, names map[string]string) map[string]int {
	out := map[string]int{}
	for _, a := range allocs {
		out[names[a.NodeID]]++
	}
	return out
}

// describe summarizes allocations for failure messages.
func describe(allocs []*nomadapi.AllocationListStub) string {
	parts := make([]string, 0, len(allocs))
	for _, a := range allocs {
		parts = append(parts, fmt.Sprintf("%s %.8s node=%.8s desired=%s client=%s", a.Name, a.ID, a.NodeID, a.DesiredStatus, a.ClientStatus))
	}
	return fmt.Sprintf("%d allocations: [%s]", len(allocs), strings.Join(parts, "; "))
}

// failedConstraints names the constraints that filtered nodes in an
// evaluation's failed placements.
func failedConstraints(ev *nomadapi.Evaluation) string {
	var parts []string
	for group, m := range ev.FailedTGAllocs {
		if m == nil {
			continue
		}
		for k, n := range m.ConstraintFiltered {
			parts = append(parts, fmt.Sprintf("%s: %q=%d", group, k, n))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
