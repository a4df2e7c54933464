package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

// newTestServer serves b over a loopback httptest server.
func newTestServer(t *testing.T, b api.Backend, opts ...api.ServerOption) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(api.NewServer(b, hclog.NewNullLogger(), opts...).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("failed to build request: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("failed to read body: %v", err)
	}
	return resp, string(raw)
}

func testJob(id string) *structs.Job {
	return &structs.Job{ID: id, Name: id, Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{
		Name: "web", Count: 2,
		Tasks: []*structs.Task{{Name: "app", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}},
	}}}
}

func registerBody(t *testing.T, j *structs.Job) string {
	t.Helper()
	raw, err := json.Marshal(api.JobRegisterRequest{Job: j})
	if err != nil {
		t.Fatalf("failed to encode job: %v", err)
	}
	return string(raw)
}

// TestHandlers checks status codes, one-line error bodies and that nothing
// is stored on bad input.
func TestHandlers(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	if _, err := fb.RegisterJob(context.Background(), testJob("existing"), api.RegisterOptions{}); err != nil {
		t.Fatalf("failed to seed job: %v", err)
	}
	allocID := fb.Allocations()[0].ID

	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantBody   string // substring
	}{
		{"list jobs", "GET", "/v1/jobs", "", 200, `"ID":"existing"`},
		{"list jobs prefix miss", "GET", "/v1/jobs?prefix=zzz", "", 200, "[]"},
		{"bad json", "PUT", "/v1/jobs", `{"Job": {`, 400, "failed to decode request body"},
		{"wrong type", "PUT", "/v1/jobs", `{"Job": {"ID": 7}}`, 400, "failed to decode request body"},
		{"missing job", "PUT", "/v1/jobs", `{}`, 400, "missing job"},
		{"invalid job", "PUT", "/v1/jobs", registerBody(t, &structs.Job{TaskGroups: testJob("x").TaskGroups}), 400, "job ID is required"},
		{"path mismatch", "PUT", "/v1/job/other", registerBody(t, testJob("x")), 400, "does not match"},
		{"get job", "GET", "/v1/job/existing", "", 200, `"TaskGroups"`},
		{"missing job 404", "GET", "/v1/job/nope", "", 404, "not found"},
		{"stop missing job", "DELETE", "/v1/job/nope?purge=true", "", 404, "not found"},
		{"bad purge", "DELETE", "/v1/job/existing?purge=maybe", "", 400, "invalid purge"},
		{"job summary", "GET", "/v1/job/existing/summary", "", 200, `"Running":2`},
		{"job allocations", "GET", "/v1/job/existing/allocations", "", 200, `"TaskGroup":"web"`},
		{"alloc by prefix", "GET", "/v1/allocation/" + allocID[:6], "", 200, `"ID":"` + allocID + `"`},
		{"alloc 404", "GET", "/v1/allocation/nope", "", 404, "not found"},
		{"alloc empty id", "GET", "/v1/allocation/", "", 404, "404 page not found"},
		{"allocs prefix", "GET", "/v1/allocations?prefix=" + allocID[:4], "", 200, allocID},
		{"nodes", "GET", "/v1/nodes", "", 200, `"Name":"dev-1"`},
		{"node by prefix", "GET", "/v1/node/" + apitest.NodeID[:8], "", 200, `"ID":"` + apitest.NodeID + `"`},
		{"node 404", "GET", "/v1/node/ffff", "", 404, "not found"},
		{"node allocations by prefix", "GET", "/v1/node/" + apitest.NodeID[:8] + "/allocations", "", 200, `"ID":"` + allocID + `"`},
		{"node allocations 404", "GET", "/v1/node/ffff/allocations", "", 404, "not found"},
		{"leader", "GET", "/v1/status/leader", "", 200, `"127.0.0.1:4647"`},
		{"agent self", "GET", "/v1/agent/self", "", 200, `"member"`},
		{"metrics disabled", "GET", "/v1/metrics", "", 404, "metrics are not enabled"},
		{"bad index", "GET", "/v1/jobs?index=abc", "", 400, "invalid index"},
		{"bad wait", "GET", "/v1/jobs?index=1&wait=soon", "", 400, "invalid wait"},
		{"logs no task", "GET", "/v1/client/fs/logs/" + allocID, "", 400, "missing task name"},
		{"logs bad type", "GET", "/v1/client/fs/logs/" + allocID + "?task=app&type=stdin", "", 400, "log type must be"},
		{"logs bad origin", "GET", "/v1/client/fs/logs/" + allocID + "?task=app&type=stdout&origin=middle", "", 400, "origin must be"},
		{"logs unknown task", "GET", "/v1/client/fs/logs/" + allocID + "?task=nope&type=stdout", "", 404, `task "nope"`},
		{"logs unknown alloc", "GET", "/v1/client/fs/logs/nope?task=app&type=stdout", "", 404, "not found"},
		{"exec no command", "GET", "/v1/client/allocation/" + allocID + "/exec?task=app", "", 400, "missing command"},
		{"exec bad command", "GET", "/v1/client/allocation/" + allocID + "/exec?task=app&command=ls", "", 400, "JSON array"},
		{"exec empty command", "GET", "/v1/client/allocation/" + allocID + "/exec?task=app&command=[]", "", 400, "command is empty"},
		{"exec unknown alloc", "GET", `/v1/client/allocation/nope/exec?task=app&command=["ls"]`, "", 404, "not found"},
		{"method not allowed", "PATCH", "/v1/jobs", "", 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fb.JobIDs()
			resp, body := do(t, tc.method, srv.URL+tc.path, tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", resp.StatusCode, tc.wantStatus, body)
			}
			if !strings.Contains(body, tc.wantBody) {
				t.Fatalf("body %q does not contain %q", body, tc.wantBody)
			}
			if resp.StatusCode >= 400 {
				if strings.Count(strings.TrimSpace(body), "\n") != 0 {
					t.Fatalf("error body is not one line: %q", body)
				}
				if after := fb.JobIDs(); strings.Join(after, ",") != strings.Join(before, ",") {
					t.Fatalf("jobs changed on error: %v -> %v", before, after)
				}
			}
			if resp.StatusCode == 200 && resp.Header.Get("X-Nomad-Index") == "" {
				t.Fatalf("missing X-Nomad-Index")
			}
		})
	}
}

// panicky is a Backend whose job listing panics or fails.
type panicky struct {
	api.Backend
	err error
}

func (p panicky) ListJobs(context.Context) ([]*structs.Job, error) {
	if p.err != nil {
		return nil, p.err
	}
	panic("boom: secret internals")
}

func TestErrorsDoNotLeak(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"panic", nil, "internal error\n"},
		{"multi-line error", errors.New("disk on fire\n\tat frame 1\n\tat frame 2"), "failed to list jobs: disk on fire; at frame 1; at frame 2\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t, panicky{Backend: apitest.NewBackend(), err: tc.err})
			resp, body := do(t, "GET", srv.URL+"/v1/jobs", "")
			if resp.StatusCode != 500 || body != tc.want {
				t.Fatalf("got %d %q, want 500 %q", resp.StatusCode, body, tc.want)
			}
		})
	}
}

func TestRegisterAndStop(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	resp, body := do(t, "PUT", srv.URL+"/v1/jobs", registerBody(t, testJob("web")))
	if resp.StatusCode != 200 {
		t.Fatalf("register: %d %s", resp.StatusCode, body)
	}
	var reg api.JobRegisterResponse
	if err := json.Unmarshal([]byte(body), &reg); err != nil {
		t.Fatalf("failed to decode %q: %v", body, err)
	}
	if reg.EvalID == "" || reg.JobModifyIndex == 0 || resp.Header.Get("X-Nomad-Index") != strconv.FormatUint(reg.JobModifyIndex, 10) {
		t.Fatalf("register response %+v, index header %q", reg, resp.Header.Get("X-Nomad-Index"))
	}
	if n := len(fb.Allocations()); n != 2 {
		t.Fatalf("allocations = %d, want 2", n)
	}
	resp, body = do(t, "DELETE", srv.URL+"/v1/job/web?purge=true", "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"EvalID":"`) {
		t.Fatalf("stop: %d %s", resp.StatusCode, body)
	}
	if ids := fb.JobIDs(); len(ids) != 0 {
		t.Fatalf("jobs after purge: %v", ids)
	}
	for _, a := range fb.Allocations() {
		if a.DesiredStatus != structs.AllocDesiredStatusStop {
			t.Fatalf("allocation %s desired %s after stop", a.ID, a.DesiredStatus)
		}
	}
}

func TestMetricsHandlerOption(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "meshlet_up 1\n") })
	srv := newTestServer(t, apitest.NewBackend(), api.WithMetricsHandler(h))
	resp, body := do(t, "GET", srv.URL+"/v1/metrics", "")
	if resp.StatusCode != 200 || body != "meshlet_up 1\n" {
		t.Fatalf("metrics: %d %q", resp.StatusCode, body)
	}
}

func TestAgentInfoOption(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend(), api.WithAgentInfo(api.AgentInfo{RPCAddr: "127.0.0.1:9999", Version: "9.9.9"}))
	_, body := do(t, "GET", srv.URL+"/v1/status/leader", "")
	if body != "\"127.0.0.1:9999\"\n" {
		t.Fatalf("leader = %q", body)
	}
	_, body = do(t, "GET", srv.URL+"/v1/agent/self", "")
	if !strings.Contains(body, `"build":"9.9.9"`) {
		t.Fatalf("agent self = %q", body)
	}
}
