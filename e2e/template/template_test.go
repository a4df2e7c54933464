// Package template holds the end-to-end test of template rendering: a job
// whose templates list another job's service instances re-renders them
// when that job scales, restarting, signalling or re-reading the
// environment of its tasks, and leaves its tasks alone across an agent
// restart when nothing changed.
package template

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

func TestTemplatesFollowServiceScaling(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	backend := a.RunJob("input/backend.hcl")
	a.RunningAllocs(backend, 1)
	consumer := a.RunJob("input/consumer.hcl")
	alloc := a.RunningAllocs(consumer, 1)[0]
	dir := filepath.Join(a.DataDir, "data", "alloc", alloc.ID)
	shared := filepath.Join(dir, "alloc")

	apiTxt := filepath.Join(dir, "restart", "local", "api.txt")
	a.Eventually(30*time.Second, "the first render with one instance", func() bool {
		return len(lines(readFile(apiTxt))) == 1
	})
	if fi, err := os.Stat(apiTxt); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("api.txt mode: %v %v", fi, err)
	}
	a.Eventually(30*time.Second, "every task started once", func() bool {
		return len(lines(readFile(filepath.Join(shared, "env.seen")))) == 1 &&
			len(lines(readFile(filepath.Join(shared, "signal.starts")))) == 1
	})
	if got := lines(readFile(filepath.Join(shared, "env.seen"))); got[0] != "1 hello from env" {
		t.Fatalf("env task saw %q, want %q", got[0], "1 hello from env")
	}

	// Scale the backend to three instances.
	if r := a.CLI("job", "run", "-var", "count=3", "input/backend.hcl"); r.Code != 0 {
		t.Fatalf("job run count=3: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	a.RunningAllocs(backend, 3)
	a.Eventually(30*time.Second, "api.txt listing three instances", func() bool {
		return len(lines(readFile(apiTxt))) == 3
	})
	a.Eventually(30*time.Second, "the restart task restarted", func() bool {
		return len(lines(readFile(filepath.Join(shared, "restart.starts")))) >= 2
	})
	a.Eventually(30*time.Second, "the env task restarted with API_COUNT=3", func() bool {
		seen := lines(readFile(filepath.Join(shared, "env.seen")))
		return len(seen) >= 2 && seen[len(seen)-1] == "3 hello from env"
	})
	a.Eventually(30*time.Second, "the signal task trapped SIGHUP", func() bool {
		return len(lines(readFile(filepath.Join(shared, "signal.hups")))) >= 1
	})
	if n := len(lines(readFile(filepath.Join(shared, "signal.starts")))); n != 1 {
		t.Errorf("signal task started %d times; change_mode signal must not restart it", n)
	}
	if ports := strings.Fields(readFile(filepath.Join(shared, "ports.txt"))); len(ports) != 3 {
		t.Errorf("ports.txt lists %q, want three ports", ports)
	}
	// The task writes restart.starts as it starts, a moment before its
	// runner reports it running.
	a.Eventually(30*time.Second, "the restarted restart task running", func() bool {
		return allocInfo(t, a, alloc.ID).TaskStates["restart"].State == "running"
	})
	info := allocInfo(t, a, alloc.ID)
	assertEvent(t, info, "restart", "Restart Signaled", "Template with change_mode restart re-rendered")
	assertEvent(t, info, "signal", "Signaling", "Template re-rendered")

	// An agent restart with nothing changed restarts no task.
	restarts := len(lines(readFile(filepath.Join(shared, "restart.starts"))))
	envStarts := len(lines(readFile(filepath.Join(shared, "env.seen"))))
	a.Interrupt()
	a.Restart()
	a.RunningAllocs(consumer, 1)
	time.Sleep(10 * time.Second) // past the restore delay and the wait
	if n := len(lines(readFile(filepath.Join(shared, "restart.starts")))); n != restarts {
		t.Errorf("restart task started %d times after the agent restart, want %d", n, restarts)
	}
	if n := len(lines(readFile(filepath.Join(shared, "env.seen")))); n != envStarts {
		t.Errorf("env task started %d times after the agent restart, want %d", n, envStarts)
	}

	// And a change after the restart is still followed.
	if r := a.CLI("job", "run", "-var", "count=2", "input/backend.hcl"); r.Code != 0 {
		t.Fatalf("job run count=2: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	a.Eventually(30*time.Second, "api.txt listing two instances after the agent restart", func() bool {
		return len(lines(readFile(apiTxt))) == 2
	})
	a.Eventually(30*time.Second, "the restart task restarted again", func() bool {
		return len(lines(readFile(filepath.Join(shared, "restart.starts")))) > restarts
	})
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func allocInfo(t *testing.T, a *framework.Agent, id string) *nomadapi.Allocation {
	t.Helper()
	info, _, err := a.Nomad().Allocations().Info(id, nil)
	if err != nil {
		t.Fatalf("alloc info: %v", err)
	}
	return info
}

func assertEvent(t *testing.T, info *nomadapi.Allocation, task, typ, msg string) {
	t.Helper()
	st := info.TaskStates[task]
	if st == nil {
		t.Errorf("no state for task %s", task)
		return
	}
	var seen []string
	for _, ev := range st.Events {
		if ev.Type == typ && ev.DisplayMessage == msg {
			return
		}
		seen = append(seen, ev.Type+": "+ev.DisplayMessage)
	}
	t.Errorf("task %s: no %q event %q; events:\n%s", task, typ, msg, strings.Join(seen, "\n"))
}

// A template reading a service that has no instance holds the task before
// its start, with an event naming what it waits for.
func TestTemplateWaitsForService(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	abs, err := filepath.Abs("input/waiter.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if r := a.CLI("job", "run", "-detach", abs); r.Code != 0 {
		t.Fatalf("job run waiter: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { _ = a.CLI("job", "stop", "-purge", "tmpl-waiter") })
	const missing = "Missing: health.service(tmpl-late|passing)"
	var allocID string
	a.Eventually(30*time.Second, "the Missing event", func() bool {
		allocs, _, err := a.Nomad().Jobs().Allocations("tmpl-waiter", false, nil)
		if err != nil || len(allocs) == 0 {
			return false
		}
		allocID = allocs[0].ID
		st := allocInfo(t, a, allocID).TaskStates["w"]
		if st == nil {
			return false
		}
		for _, ev := range st.Events {
			if ev.Type == "Task hook message" && ev.DisplayMessage == missing {
				return true
			}
		}
		return false
	})
	if st := allocInfo(t, a, allocID).TaskStates["w"]; st.State != "pending" {
		t.Fatalf("task is %s while its template waits", st.State)
	}
	if r := a.CLI("job", "run", "-var", "service=tmpl-late", "input/backend.hcl"); r.Code != 0 {
		t.Fatalf("job run backend: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { _ = a.CLI("job", "stop", "-purge", "tmpl-backend") })
	a.RunningAllocs("tmpl-waiter", 1)
	late := filepath.Join(a.DataDir, "data", "alloc", allocID, "w", "local", "late.txt")
	if got := lines(readFile(late)); len(got) != 1 {
		t.Errorf("late.txt = %q, want one port", got)
	}
}
