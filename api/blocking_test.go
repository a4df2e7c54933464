package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

func indexOf(t *testing.T, h string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		t.Fatalf("bad X-Nomad-Index %q: %v", h, err)
	}
	return n
}

// TestBlockingQueryTimesOut: with no change, a blocking query returns after
// its wait with the same index.
func TestBlockingQueryTimesOut(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	idx := fb.Index()
	resp, body := do(t, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=50ms", srv.URL, idx), "")
	if resp.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := indexOf(t, resp.Header.Get("X-Nomad-Index")); got != idx {
		t.Fatalf("index = %d, want %d", got, idx)
	}
}

// TestBlockingQueryWakes: a query blocked at the current index returns the
// change that wakes it, with a newer index.
func TestBlockingQueryWakes(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	idx := fb.Index()
	type result struct {
		status int
		index  string
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := httpGet(fmt.Sprintf("%s/v1/jobs?index=%d&wait=30s", srv.URL, idx))
		if err != nil {
			done <- result{body: err.Error()}
			return
		}
		done <- result{resp.status, resp.index, resp.body}
	}()
	if _, err := fb.RegisterJob(context.Background(), testJob("late"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	r := <-done
	if r.status != 200 || !strings.Contains(r.body, `"ID":"late"`) {
		t.Fatalf("blocking query returned %d %q", r.status, r.body)
	}
	if got := indexOf(t, r.index); got <= idx {
		t.Fatalf("index = %d, want > %d", got, idx)
	}
}

// TestEvaluationFallback: a Backend without EvaluationBackend still answers
// for the evaluations the server handed out.
func TestEvaluationFallback(t *testing.T) {
	plain := struct{ api.Backend }{apitest.NewBackend()}
	srv := newTestServer(t, plain)
	resp, body := do(t, "PUT", srv.URL+"/v1/jobs", registerBody(t, testJob("web")))
	if resp.StatusCode != 200 {
		t.Fatalf("register: %d %s", resp.StatusCode, body)
	}
	var reg api.JobRegisterResponse
	if err := json.Unmarshal([]byte(body), &reg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	tests := []struct {
		path       string
		wantStatus int
		want       string
	}{
		{"/v1/evaluation/" + reg.EvalID, 200, `"Status":"complete"`},
		{"/v1/evaluation/" + reg.EvalID, 200, `"JobID":"web"`},
		{"/v1/evaluation/" + reg.EvalID + "/allocations", 200, `"TaskGroup":"web"`},
		{"/v1/job/web/evaluations", 200, reg.EvalID},
		{"/v1/evaluation/nope", 404, "not found"},
	}
	for _, tc := range tests {
		resp, body := do(t, "GET", srv.URL+tc.path, "")
		if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tc.path, resp.StatusCode, body, tc.wantStatus, tc.want)
		}
	}
}

// TestPlacementFailureEvaluation: an EvaluationBackend's placement failure
// is served as FailedTGAllocs.
func TestPlacementFailureEvaluation(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	job := testJob("dock")
	job.TaskGroups[0].Tasks[0].Driver = "docker"
	res, err := fb.RegisterJob(context.Background(), job, api.RegisterOptions{})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	resp, body := do(t, "GET", srv.URL+"/v1/evaluation/"+res.EvalID, "")
	if resp.StatusCode != 200 || !strings.Contains(body, "driver docker not available on node dev-1") {
		t.Fatalf("evaluation = %d %q", resp.StatusCode, body)
	}
}

// TestCloseEndsLongRequests: Close releases a blocking query and a log
// follower, so that http.Server.Shutdown can finish.
func TestCloseEndsLongRequests(t *testing.T) {
	fb := apitest.NewBackend()
	if _, err := fb.RegisterJob(context.Background(), testJob("web"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	s := api.NewServer(fb, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	urls := []string{
		fmt.Sprintf("%s/v1/jobs?index=%d&wait=10m", srv.URL, fb.Index()),
		fmt.Sprintf("%s/v1/client/fs/logs/%s?task=app&type=stdout&follow=true&plain=true", srv.URL, fb.Allocations()[0].ID),
	}
	done := make(chan error, len(urls))
	for _, u := range urls {
		go func() {
			_, err := httpGet(u)
			done <- err
		}()
	}
	s.Close()
	for range urls {
		if err := <-done; err != nil {
			t.Fatalf("request failed instead of ending: %v", err)
		}
	}
}
