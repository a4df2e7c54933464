package agent

import (
	"testing"
	"time"

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

// The server block's job bounds reach the jobspec checks at submission.
func TestServerBoundsReachValidation(t *testing.T) {
	job := func(count int) *structs.Job {
		return &structs.Job{ID: "j", Name: "j", Type: structs.JobTypeService, Datacenters: []string{"dc1"},
			TaskGroups: []*structs.TaskGroup{{Name: "g", Count: count, Tasks: []*structs.Task{{
				Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	}
	a := &Agent{cfg: &Config{Server: ServerConfig{JobMaxCount: 5}}}
	if _, err := a.validateJob(job(5)); err != nil {
		t.Fatalf("count 5 with job_max_count 5: %v", err)
	}
	if _, err := a.validateJob(job(6)); err == nil {
		t.Fatal("count 6 accepted with job_max_count 5")
	}
	a.cfg.Server.JobMaxCount = -1
	if _, err := a.validateJob(job(20000)); err != nil {
		t.Fatalf("count 20000 with no limit: %v", err)
	}
	a.cfg.Server.JobMaxCount = 0
	if _, err := a.validateJob(job(20000)); err == nil {
		t.Fatal("count 20000 accepted under the default limit")
	}
}
