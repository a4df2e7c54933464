package api_test

import (
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

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
