package agent

import (
	"testing"
	"time"

	"github.com/meshlet/meshlet/state"
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
