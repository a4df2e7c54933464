package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// TestParseEndpointRejectsExpensiveJobspecs: the probe that killed the
// agent through PUT /v1/jobs/parse (228 bytes asking for about a
// terabyte) and a megabyte of parentheses (a parser stack overflow) are
// answered 400 with the position, and the server keeps serving.
func TestParseEndpointRejectsExpensiveJobspecs(t *testing.T) {
	srv := httptest.NewServer(api.NewServer(apitest.NewBackend(), hclog.NewNullLogger()).Handler())
	t.Cleanup(srv.Close)
	probe := `job "x" {
  meta {
    a = join(format("%01000000d", 0), split("0", format("%01000000d", 0)))
  }
}`
	tests := []struct{ name, hcl, want string }{
		{"issue probe", probe, "job.hcl:3:39: error: Evaluation limit exceeded; split would produce 1000001 elements"},
		{"parentheses", "job \"x\" {\n  meta {\n    a = " + strings.Repeat("(", 1<<20) + "1" + strings.Repeat(")", 1<<20) + "\n  }\n}\n",
			"job.hcl:3:135: error: Jobspec nests too deeply"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, _ := json.Marshal(api.JobsParseRequest{JobHCL: tc.hcl})
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/jobs/parse", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), tc.want) {
				t.Fatalf("status %d body %q; want 400 with %q", resp.StatusCode, got, tc.want)
			}
		})
	}
}
