package api_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

const checksJobHCL = `
job "checks" {
  group "web" {
    network {
      port "http" {}
    }
    service {
      name = "web"
      port = "http"
      check {
        type                     = "http"
        path                     = "/health"
        method                   = "POST"
        body                     = "ping"
        protocol                 = "https"
        interval                 = "10s"
        timeout                  = "2s"
        tls_skip_verify          = true
        tls_server_name          = "web.internal"
        initial_status           = "warning"
        on_update                = "ignore_warnings"
        notes                    = "db reachable"
        success_before_passing   = 2
        failures_before_critical = 3
        header {
          X-Probe = ["a", "b"]
        }
        check_restart {
          limit           = 3
          grace           = "30s"
          ignore_warnings = true
        }
      }
      check {
        type         = "grpc"
        grpc_service = "web.Health"
        grpc_use_tls = true
        interval     = "5s"
        timeout      = "1s"
      }
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`

// The official client's ParseHCL sees every check field, and a job
// registered with them reads back unchanged.
func TestOfficialClientCheckFields(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.Jobs().ParseHCL(checksJobHCL, true)
	if err != nil {
		t.Fatalf("ParseHCL: %v", err)
	}
	assertChecks(t, "parse", job)
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("Register: %v", err)
	}
	stored, _, err := c.Jobs().Info("checks", nil)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	assertChecks(t, "info", stored)
}

func assertChecks(t *testing.T, stage string, job *nomadapi.Job) {
	t.Helper()
	if len(job.TaskGroups) != 1 || len(job.TaskGroups[0].Services) != 1 || len(job.TaskGroups[0].Services[0].Checks) != 2 {
		t.Fatalf("%s: unexpected job shape: %+v", stage, job)
	}
	checks := job.TaskGroups[0].Services[0].Checks
	h, g := checks[0], checks[1]
	if h.Type != "http" || h.Path != "/health" || h.Method != "POST" || h.Body != "ping" || h.Protocol != "https" ||
		h.Interval != 10*time.Second || h.Timeout != 2*time.Second || !h.TLSSkipVerify || h.TLSServerName != "web.internal" ||
		h.InitialStatus != "warning" || h.OnUpdate != "ignore_warnings" || h.Notes != "db reachable" ||
		h.SuccessBeforePassing != 2 || h.FailuresBeforeCritical != 3 {
		t.Errorf("%s: http check = %+v", stage, h)
	}
	if v := h.Header["X-Probe"]; len(v) != 2 || v[0] != "a" || v[1] != "b" {
		t.Errorf("%s: http check header = %v", stage, h.Header)
	}
	if cr := h.CheckRestart; cr == nil || cr.Limit != 3 || cr.Grace == nil || *cr.Grace != 30*time.Second || !cr.IgnoreWarnings {
		t.Errorf("%s: http check_restart = %+v", stage, h.CheckRestart)
	}
	if g.Type != "grpc" || g.GRPCService != "web.Health" || !g.GRPCUseTLS || g.Interval != 5*time.Second {
		t.Errorf("%s: grpc check = %+v", stage, g)
	}
}

// withoutChecks hides apitest.Backend's CheckBackend: an agent that runs
// no allocations.
type withoutChecks struct{ api.Backend }

// GET /v1/client/allocation/:alloc/checks answers the node's results in
// Nomad's shape (a unique prefix resolves), 404 for an unknown
// allocation and 404 on an agent without a CheckBackend.
func TestHandleChecks(t *testing.T) {
	b := apitest.NewBackend()
	srv := newTestServer(t, b)
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.Jobs().ParseHCL(checksJobHCL, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	allocs := b.Allocations()
	if len(allocs) != 1 {
		t.Fatalf("%d allocations, want 1", len(allocs))
	}
	id := allocs[0].ID
	want := nomadapi.AllocCheckStatuses{"c1": {ID: "c1", Check: "service: \"web\" check", Service: "web", Group: "checks.web[0]",
		Mode: "healthiness", Status: "success", StatusCode: 200, Output: "ok", Timestamp: 1700000000}}
	b.SetAllocChecks(id, want)

	got, err := c.Allocations().Checks(id[:8], nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Checks = %+v, %v; want %+v", got, err, want)
	}
	if resp, body := do(t, http.MethodGet, srv.URL+"/v1/client/allocation/ffffffff/checks", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown allocation: status %d (%s), want 404", resp.StatusCode, body)
	}
	b.SetAllocChecks(id, nil)
	if _, body := do(t, http.MethodGet, srv.URL+"/v1/client/allocation/"+id+"/checks", ""); strings.TrimSpace(body) != "{}" {
		t.Errorf("no results: body %q, want {}", body)
	}

	plain := newTestServer(t, withoutChecks{b})
	resp, body := do(t, http.MethodGet, plain.URL+"/v1/client/allocation/"+id+"/checks", "")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, api.ErrNoChecks.Error()) {
		t.Errorf("agent without checks: status %d (%s), want 404 naming %q", resp.StatusCode, body, api.ErrNoChecks)
	}
	if n := b.AllocChecksCalls(); n != 2 {
		t.Errorf("backend answered %d checks calls, want 2 (the unknown allocation stops at the lookup)", n)
	}
}
