package grpc

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

// TestExposedGRPCCheck: grpc-b's app binds 127.0.0.1 in its namespace;
// its grpc check (expose = true) targets a generated port whose expose
// path /grpc.health.v1.Health/Check (protocol http2) the built-in proxy
// serves in h2c and forwards over h2c to the app. The check passes
// (alloc checks endpoint and alloc status), and the host reaches the app's
// health service through the mapped expose port.
func TestExposedGRPCCheck(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob(jobspec)
	allocs := a.RunningAllocs(job, 3)
	alloc := a.AllocByGroup(allocs, "grpc-b-v1")

	j, _, err := a.Nomad().Jobs().Info(job, nil)
	if err != nil {
		t.Fatal(err)
	}
	label := exposedGRPCCheckLabel(t, j, "grpc-b-v1")
	port := hostPort(t, a, alloc.ID, label)

	var last string
	a.Eventually(30*time.Second, "the exposed grpc check passing", func() bool {
		st, err := a.Nomad().Allocations().Checks(alloc.ID, nil)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%+v", st)
		for _, cs := range st {
			if cs.Check == "grpc-b-health" {
				// In bridge mode the check runs inside the namespace,
				// where the expose port is the host port (to = -1).
				return cs.Status == "passing" && strings.Contains(cs.Output, fmt.Sprintf(":%d/hello: SERVING", port))
			}
		}
		return false
	})
	t.Logf("alloc checks: %s", last)
	status := a.MustCLI("alloc", "status", alloc.ID[:8])
	if !strings.Contains(status, "grpc-b-health") || !strings.Contains(status, "passing") {
		t.Errorf("alloc status does not show the passing grpc check:\n%s", status)
	}

	// From the host, through the mapped expose port: the app answers
	// (its id in the header), also for a service it does not know.
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if out := hostGRPCGet(t, a, "-n", "5", addr); out != strings.Repeat("OK v1\n", 5) {
		t.Errorf("grpc-get -n 5 %s from the host = %q, want 5x OK v1", addr, out)
	}
	if out := hostGRPCGet(t, a, "-service", "nope", addr); out != "error NotFound\n" {
		t.Errorf("grpc-get -service nope %s from the host = %q, want the app's NotFound", addr, out)
	}
}

// hostGRPCGet runs `demo-app grpc-get ARGS` on the host.
func hostGRPCGet(t *testing.T, a *framework.Agent, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, a.Bin, append([]string{"demo-app", "grpc-get", "-timeout", "3s"}, args...)...).Output()
	if err != nil {
		t.Fatalf("grpc-get %v: %v", args, err)
	}
	return string(out)
}

// exposedGRPCCheckLabel returns the port label group's grpc-b-health check
// targets, and checks the expose path registered for it.
func exposedGRPCCheckLabel(t *testing.T, j *nomadapi.Job, group string) string {
	t.Helper()
	for _, tg := range j.TaskGroups {
		if *tg.Name != group {
			continue
		}
		for _, s := range tg.Services {
			for _, c := range s.Checks {
				if c.Name != "grpc-b-health" {
					continue
				}
				if !strings.HasPrefix(c.PortLabel, "svc_grpc-b_ck_") {
					t.Fatalf("exposed check port %q, want svc_grpc-b_ck_<hash>", c.PortLabel)
				}
				for _, p := range s.Connect.SidecarService.Proxy.Expose.Paths {
					if p.ListenerPort == c.PortLabel && p.Path == "/grpc.health.v1.Health/Check" && p.Protocol == "http2" && p.LocalPathPort == 9001 {
						return c.PortLabel
					}
				}
				t.Fatalf("no http2 expose path for the check on %q: %+v", c.PortLabel, s.Connect.SidecarService.Proxy.Expose)
			}
		}
	}
	t.Fatalf("registered job has no grpc-b-health check in group %s", group)
	return ""
}

// hostPort is the host port of an allocation's port label.
func hostPort(t *testing.T, a *framework.Agent, allocID, label string) int {
	t.Helper()
	al, _, err := a.Nomad().Allocations().Info(allocID, nil)
	if err != nil || al.AllocatedResources == nil {
		t.Fatalf("allocation %s: %v", allocID, err)
	}
	for _, p := range al.AllocatedResources.Shared.Ports {
		if p.Label == label {
			return p.Value
		}
	}
	t.Fatalf("allocation %s has no port %q: %+v", allocID, label, al.AllocatedResources.Shared.Ports)
	return 0
}
