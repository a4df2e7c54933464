// Package expose holds the end-to-end tests of expose paths (the sidecar
// serving an app's health path without mTLS on a mapped port, and checks
// with expose = true going through it) and of check_restart.
package expose

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

var client = &http.Client{Timeout: 3 * time.Second}

// get GETs url and returns the status code and body, or the error.
func get(url string) (int, string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(body), err
}

// hostPorts maps an allocation's port labels to their host ports.
func hostPorts(t *testing.T, a *framework.Agent, allocID string) map[string]int {
	t.Helper()
	al, _, err := a.Nomad().Allocations().Info(allocID, nil)
	if err != nil || al.AllocatedResources == nil {
		t.Fatalf("allocation %s: %v", allocID, err)
	}
	out := map[string]int{}
	for _, p := range al.AllocatedResources.Shared.Ports {
		out[p.Label] = p.Value
	}
	return out
}

// TestExposePathsFromTheHost: the app binds 127.0.0.1 inside its
// namespace. Its sidecar serves /health (and only /health) on the mapped
// port "health" without mTLS, so the host reaches it at 127.0.0.1:<host
// port>; the app's own mapped port reaches nothing. The http check with
// expose = true got a port of its own and goes through the sidecar.
func TestExposePathsFromTheHost(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/expose.hcl")
	alloc := a.RunningAllocs(job, 1)[0]
	ports := hostPorts(t, a, alloc.ID)
	if ports["health"] == 0 || ports["http"] == 0 {
		t.Fatalf("allocation ports %v lack health or http", ports)
	}

	healthURL := fmt.Sprintf("http://127.0.0.1:%d/health", ports["health"])
	var last string
	a.Eventually(30*time.Second, "GET "+healthURL+" answering from the app", func() bool {
		code, body, err := get(healthURL)
		last = fmt.Sprint(code, " ", body, " ", err)
		return err == nil && code == http.StatusOK && strings.TrimSpace(body) == "api healthy"
	})
	t.Logf("host -> expose port %d /health: %s", ports["health"], last)

	// Only the exposed path: the app answers /hello, the expose listener
	// does not route it.
	if code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/hello", ports["health"])); err != nil || code != http.StatusNotFound {
		t.Errorf("GET /hello through the expose port = %d %q %v, want 404", code, body, err)
	}
	// The app's port is mapped, but the app listens on loopback only.
	if code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/health", ports["http"])); err == nil {
		t.Errorf("GET /health on the app's own mapped port %d answered %d %q; want no connection", ports["http"], code, body)
	}

	// The exposed check targets a generated port svc_api_ck_<hash>.
	j, _, err := a.Nomad().Jobs().Info(job, nil)
	if err != nil {
		t.Fatal(err)
	}
	label := exposedCheckLabel(t, j)
	if ports[label] == 0 {
		t.Fatalf("allocation ports %v lack the exposed check's %q", ports, label)
	}
	checkURL := fmt.Sprintf("http://127.0.0.1:%d/health", ports[label])
	if code, _, err := get(checkURL); err != nil || code != http.StatusOK {
		t.Errorf("GET %s (the check's expose path) = %d, %v", checkURL, code, err)
	}
	a.Eventually(20*time.Second, "the exposed check passing through its expose port", func() bool {
		st, err := a.Nomad().Allocations().Checks(alloc.ID, nil)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%+v", st)
		for _, cs := range st {
			if cs.Check == "api-health" {
				// Checks run inside the namespace, where the port
				// (to = -1) is the same as on the host.
				return cs.Status == "passing" && strings.Contains(cs.Output, fmt.Sprintf(":%d/health", ports[label]))
			}
		}
		return false
	})
	t.Logf("alloc checks: %s", last)
	// Registering the same jobspec again changes nothing: the generated
	// port and expose path are the same, so no new version.
	a.MustCLI("job", "run", "input/expose.hcl")
	if j2, _, err := a.Nomad().Jobs().Info(job, nil); err != nil {
		t.Error(err)
	} else if *j2.Version != *j.Version {
		t.Errorf("re-running the same jobspec: version %d -> %d, want unchanged", *j.Version, *j2.Version)
	}
	status := a.MustCLI("alloc", "status", alloc.ID[:8])
	if !strings.Contains(status, "api-health") || !strings.Contains(status, "passing") {
		t.Errorf("alloc status does not show the passing exposed check:\n%s", status)
	}
}

// exposedCheckLabel returns the port label the registered job's api-health
// check targets, and checks it has its expose path.
func exposedCheckLabel(t *testing.T, j *nomadapi.Job) string {
	t.Helper()
	for _, tg := range j.TaskGroups {
		for _, s := range tg.Services {
			for _, c := range s.Checks {
				if c.Name != "api-health" {
					continue
				}
				if !strings.HasPrefix(c.PortLabel, "svc_api_ck_") {
					t.Fatalf("exposed check port %q, want svc_api_ck_<hash>", c.PortLabel)
				}
				for _, p := range s.Connect.SidecarService.Proxy.Expose.Paths {
					if p.ListenerPort == c.PortLabel && p.Path == "/health" && p.LocalPathPort == 8080 {
						return c.PortLabel
					}
				}
				t.Fatalf("no expose path for the check on %q: %+v", c.PortLabel, s.Connect.SidecarService.Proxy.Expose)
			}
		}
	}
	t.Fatal("registered job has no api-health check")
	return ""
}

// TestCheckRestartRestartsTheTask: a check failing `limit` times in a row
// restarts its task ("Restart Signaled", restart count up); once healthy
// the task keeps running and the check passes.
func TestCheckRestartRestartsTheTask(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/restart.hcl")
	alloc := a.RunningAllocs(job, 1)[0]
	passing := func() bool {
		st, err := a.Nomad().Allocations().Checks(alloc.ID, nil)
		if err != nil {
			return false
		}
		for _, cs := range st {
			if cs.Check == "web-health" {
				return cs.Status == "passing"
			}
		}
		return false
	}
	a.Eventually(20*time.Second, "the check passing", passing)

	flag := filepath.Join(a.DataDir, "data", "alloc", alloc.ID, "alloc", "unhealthy")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	var state *nomadapi.TaskState
	a.Eventually(20*time.Second, "the task restarted by check_restart", func() bool {
		al, _, err := a.Nomad().Allocations().Info(alloc.ID, nil)
		if err != nil {
			return false
		}
		state = al.TaskStates["web"]
		return state != nil && state.Restarts >= 1
	})
	took := time.Since(failed)
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	var signaled string
	for _, ev := range state.Events {
		if ev.Type == "Restart Signaled" {
			signaled = ev.RestartReason
			if signaled == "" {
				signaled = ev.DisplayMessage
			}
		}
	}
	if !strings.Contains(signaled, "web-health") {
		t.Errorf("no Restart Signaled event naming the check (got %q): %+v", signaled, state.Events)
	}
	t.Logf("restart %s after the check started failing (interval 1s, limit 2): %s", took.Round(10*time.Millisecond), signaled)
	if took > 10*time.Second {
		t.Errorf("restart took %s; limit 2 at 1s intervals should take about 2-3s", took)
	}
	a.Eventually(30*time.Second, "the restarted task running with its check passing", func() bool {
		al, _, err := a.Nomad().Allocations().Info(alloc.ID, nil)
		return err == nil && al.TaskStates["web"] != nil && al.TaskStates["web"].State == "running" && passing()
	})
}
