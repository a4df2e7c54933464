package server

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// portJob is a one-allocation raw_exec job holding static host port port.
func portJob(id string, port int) *structs.Job {
	j := testJob(id, "raw_exec", 1)
	j.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "host",
		ReservedPorts: []structs.Port{{Label: "http", Value: port}}}}
	return j
}

// liveAllocs returns the job's allocations meant to run.
func liveAllocs(t *testing.T, s *Server, jobID string) []*structs.Allocation {
	t.Helper()
	allocs, err := s.JobAllocs(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	var out []*structs.Allocation
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun && !a.TerminalStatus() {
			out = append(out, a)
		}
	}
	return out
}

// A placement that failed for lack of room is retried when room frees up
// on a node (an allocation there finished), as Nomad's blocked
// evaluations are, and not only when a node changes.
func TestBlockedPlacementRetriedWhenCapacityFrees(t *testing.T) {
	ctx := context.Background()
	for _, restart := range []bool{false, true} {
		name := map[bool]string{false: "same leader", true: "after restart"}[restart]
		t.Run(name, func(t *testing.T) {
			s, st := newServer(t)
			if _, err := s.RegisterJob(ctx, portJob("a", 9002)); err != nil {
				t.Fatal(err)
			}
			a := liveAllocs(t, s, "a")
			res, err := s.RegisterJob(ctx, portJob("b", 9002))
			if err != nil {
				t.Fatal(err)
			}
			if e, _ := s.Eval(ctx, res.EvalID); len(a) != 1 || e.FailedTGAllocs["g"] == nil {
				t.Fatalf("setup: a has %d allocs, b's eval %+v; want b blocked on a's port", len(a), e)
			}
			if restart {
				s.Shutdown()
				s = startServer(t, st, Config{})
			}
			if _, err := s.StopJob(ctx, "a", false); err != nil {
				t.Fatal(err)
			}
			setClientStatus(t, s, structs.AllocClientStatusComplete, a...)
			if got := liveAllocs(t, s, "b"); len(got) != 1 {
				t.Fatalf("b has %d allocations after a's freed port 9002, want 1", len(got))
			}
			evals, _ := s.JobEvals(ctx, "b")
			if len(evals) == 0 || evals[0].TriggeredBy != TriggerQueuedAllocs || evals[0].FailedTGAllocs != nil {
				t.Fatalf("b's latest evaluation %+v, want a %s one that placed", evals[0], TriggerQueuedAllocs)
			}
		})
	}
}
