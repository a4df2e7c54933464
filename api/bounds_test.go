package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/jobspecs"
)

// The API bounds IDs at the jobspec's name limit, the one the server's
// validation applies: one byte more is a 400 at the API (it used to pass up
// to 256 bytes, and a namespace that long was stored), the limit itself is
// accepted.
func TestIDLengthIsTheJobspecLimit(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	atLimit := strings.Repeat("a", jobspecs.MaxNameBytes)
	over := strings.Repeat("b", jobspecs.MaxNameBytes+1)
	overNS := testJob("ns")
	overNS.Namespace = over
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"ID at the limit", "PUT", "/v1/jobs", registerBody(t, testJob(atLimit)), 200},
		{"ID over the limit", "PUT", "/v1/jobs", registerBody(t, testJob(over)), 400},
		{"namespace over the limit", "PUT", "/v1/jobs", registerBody(t, overNS), 400},
		{"path ID over the limit", "GET", "/v1/job/" + over, "", 400},
		{"path ID at the limit", "GET", "/v1/job/" + atLimit, "", 200},
	} {
		resp, body := do(t, tc.method, srv.URL+tc.path, tc.body)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if jobs, _ := fb.ListJobs(context.Background()); len(jobs) != 1 {
		t.Errorf("%d jobs stored, want only the one at the limit", len(jobs))
	}
}
