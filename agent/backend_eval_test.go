package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// A delayed follow-up evaluation (a pending reschedule) shows when it runs
// and which evaluation made it, as Nomad's WaitUntil and PreviousEval.
func TestToAPIEvalFollowup(t *testing.T) {
	when := time.Date(2026, 12, 3, 14, 0, 30, 0, time.UTC)
	out := toAPIEval(&state.Evaluation{ID: "e2", Status: "pending", TriggeredBy: "alloc-failure",
		WaitUntil: when.UnixNano(), PreviousEval: "e1"})
	if !out.WaitUntil.Equal(when) || out.PreviousEval != "e1" {
		t.Fatalf("WaitUntil %v PreviousEval %q, want %v and e1", out.WaitUntil, out.PreviousEval, when)
	}
	if now := toAPIEval(&state.Evaluation{ID: "e3"}); !now.WaitUntil.IsZero() {
		t.Fatalf("an evaluation without delay has WaitUntil %v", now.WaitUntil)
	}
}

// The server block's job bounds reach the server's admission, which alone
// enforces them (the jobspec checks leave count and size to it, instead of
// checking the same bounds a second time).
func TestServerBoundsFromConfig(t *testing.T) {
	job := func(id string, count int) *structs.Job {
		return &structs.Job{ID: id, Name: id, Type: structs.JobTypeBatch, Datacenters: []string{"dc1"},
			TaskGroups: []*structs.TaskGroup{{Name: "g", Count: count, Tasks: []*structs.Task{{
				Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	}
	a := &Agent{cfg: &Config{}}
	if _, err := a.validateJob(job("j", 20_000)); err != nil {
		t.Fatalf("the jobspec checks bound count again: %v", err)
	}
	cfg := DevConfig()
	cfg.DataDir, cfg.Ports, cfg.NodeName = t.TempDir(), Ports{}, "test-node"
	cfg.Server.JobMaxCount, cfg.Server.JobMaxSize = 5, 2048
	b, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })
	ctx := context.Background()
	if _, err := b.Backend().RegisterJob(ctx, job("six", 6), api.RegisterOptions{}); err == nil || !strings.Contains(err.Error(), "more than 5 allocations") {
		t.Fatalf("count 6 with job_max_count 5: %v", err)
	}
	big := job("big", 1)
	big.Meta = map[string]string{"pad": strings.Repeat("x", 4096)}
	if _, err := b.Backend().RegisterJob(ctx, big, api.RegisterOptions{}); err == nil || !strings.Contains(err.Error(), "more than the limit of 2048 bytes") {
		t.Fatalf("a 4 KB job with job_max_size 2048: %v", err)
	}
	if jobs, _ := b.Backend().ListJobs(ctx); len(jobs) != 0 {
		t.Fatalf("%d jobs stored", len(jobs))
	}
}
