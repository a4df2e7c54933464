package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

const varJobHCL = `
variable "count" {
  type    = number
  default = 1
}
variable "cmd" {
  type    = string
  default = "/bin/true"
}
job "vars" {
  group "g" {
    count = var.count
    task "t" {
      driver = "raw_exec"
      config {
        command = var.cmd
      }
    }
  }
}
`

func TestParseEndpoint(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	body := func(hcl, vars string) string {
		raw, _ := json.Marshal(api.JobsParseRequest{JobHCL: hcl, Variables: vars, Canonicalize: true})
		return string(raw)
	}
	thousand := "[" + strings.Repeat("0,", 1000) + "]"
	tests := []struct {
		name       string
		body       string
		wantStatus int
		want       []string
	}{
		{"defaults", body(varJobHCL, ""), 200, []string{`"ID":"vars"`, `"Count":1`, `"command":"/bin/true"`}},
		{"variables file", body(varJobHCL, "count = 3\ncmd = \"/bin/echo\"\n"), 200, []string{`"Count":3`, `"command":"/bin/echo"`}},
		// The server checks count against its own job_max_count at
		// submission; the parse endpoint does not know it.
		{"count over the default bound", body(varJobHCL, "count = 15000\n"), 200, []string{`"Count":15000`}},
		// Variables is a variables file, as Nomad reads it: a value for an
		// undeclared variable is a warning (dropped), not an error.
		{"undeclared variable", body(varJobHCL, "count = 2\nnope = 1\n"), 200, []string{`"Count":2`}},
		{"bad variables", body(varJobHCL, "count = \n"), 400, []string{"invalid Variables"}},
		{"non-constant variable", body(varJobHCL, "count = var.x\n"), 400, []string{`variable "count" must be a constant`}},
		// Evaluating a variables file is bounded like a jobspec: nested
		// loops over literal lists would otherwise build 10^12 elements.
		{"expensive variables", body(varJobHCL, "count = [for a in "+thousand+" : [for b in "+thousand+" : [for c in "+thousand+" : 0]]]\n"),
			400, []string{"invalid Variables", "limit"}},
		{"syntax error", body("job \"x\" {\n  group \"g\" {\n", ""), 400, []string{"job.hcl:", ": error: "}},
		{"unknown attribute", body("job \"x\" {\n  bogus = 1\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n", ""), 400, []string{`job.hcl:2:3: error: Unsupported argument`}},
		{"empty", body("  ", ""), 400, []string{"JobHCL is empty"}},
		{"not json", "JobHCL=x", 400, []string{"failed to decode request body"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := do(t, "PUT", srv.URL+"/v1/jobs/parse", tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("body %q lacks %q", got, w)
				}
			}
			if resp.StatusCode != 200 && strings.Count(strings.TrimSpace(got), "\n") != 0 {
				t.Fatalf("error is not one line: %q", got)
			}
		})
	}
}

// TestParseEndpointCanonicalize: Canonicalize false returns the job as
// written, without the defaults Canonicalize fills.
func TestParseEndpointCanonicalize(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	for _, canonicalize := range []bool{true, false} {
		raw, _ := json.Marshal(api.JobsParseRequest{JobHCL: varJobHCL, Canonicalize: canonicalize})
		resp, got := do(t, "PUT", srv.URL+"/v1/jobs/parse", string(raw))
		if resp.StatusCode != 200 {
			t.Fatalf("canonicalize %v: status %d: %s", canonicalize, resp.StatusCode, got)
		}
		var job map[string]any
		if err := json.Unmarshal([]byte(got), &job); err != nil {
			t.Fatal(err)
		}
		if _, has := job["Region"]; has != canonicalize {
			t.Errorf("canonicalize %v: Region present = %v: %s", canonicalize, has, got)
		}
		if !strings.Contains(got, `"command":"/bin/true"`) {
			t.Errorf("canonicalize %v: %s", canonicalize, got)
		}
	}
}
