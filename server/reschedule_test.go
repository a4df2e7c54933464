package server

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

func reschedJob(id string, policy *structs.ReschedulePolicy) *structs.Job {
	j := testJob(id, "raw_exec", 1)
	j.TaskGroups[0].ReschedulePolicy = policy
	return j
}

func constantDelay(d time.Duration) *structs.ReschedulePolicy {
	return &structs.ReschedulePolicy{Delay: ptr(d), DelayFunction: ptr(structs.RescheduleDelayConstant), Unlimited: ptr(true)}
}

// liveAlloc returns the job's single allocation meant to run.
func liveAlloc(t *testing.T, s *Server, jobID string) *structs.Allocation {
	t.Helper()
	allocs, err := s.JobAllocs(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	var live []*structs.Allocation
	for _, a := range allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun && a.NextAllocation == "" {
			live = append(live, a)
		}
	}
	if len(live) != 1 {
		t.Fatalf("job %s has %d allocations meant to run", jobID, len(live))
	}
	return live[0]
}

// waitReplaced polls until prev was replaced and returns its replacement.
func waitReplaced(t *testing.T, st state.Store, prev string) *structs.Allocation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		a, err := st.Alloc(prev)
		if err != nil {
			t.Fatal(err)
		}
		if a.NextAllocation != "" {
			next, err := st.Alloc(a.NextAllocation)
			if err != nil {
				t.Fatal(err)
			}
			return next
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("allocation %s was never replaced", prev)
	return nil
}

func TestFailedAllocIsRescheduledAfterItsDelay(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, reschedJob("web", constantDelay(200*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	first := liveAlloc(t, s, "web")
	setClientStatus(t, s, structs.AllocClientStatusFailed, first)

	// At once: a pending follow-up evaluation, named by the failed allocation.
	failed, _ := st.Alloc(first.ID)
	if failed.FollowupEvalID == "" || failed.NextAllocation != "" {
		t.Fatalf("failed allocation = %+v", failed)
	}
	follow, err := s.Eval(ctx, failed.FollowupEvalID)
	if err != nil || follow.Status != state.EvalStatusPending || follow.TriggeredBy != TriggerAllocFailure ||
		follow.WaitUntil < failed.ModifyTime+int64(200*time.Millisecond) {
		t.Fatalf("follow-up = %+v, %v", follow, err)
	}

	next := waitReplaced(t, st, first.ID)
	old, _ := st.Alloc(first.ID)
	if next.PreviousAllocation != first.ID || next.Name != first.Name || next.ClientStatus != structs.AllocClientStatusPending ||
		old.DesiredStatus != structs.AllocDesiredStatusStop || old.DesiredDescription != scheduler.DescRescheduled {
		t.Fatalf("replacement %+v of %+v", next, old)
	}
	if tr := next.RescheduleTracker; tr == nil || len(tr.Events) != 1 || tr.Events[0].PrevAllocID != first.ID ||
		tr.Events[0].Delay != 200*time.Millisecond {
		t.Fatalf("tracker = %+v", next.RescheduleTracker)
	}
	if e, _ := s.Eval(ctx, follow.ID); e.Status != state.EvalStatusComplete || next.EvalID != follow.ID {
		t.Fatalf("follow-up after running: %+v (replacement's eval %s)", e, next.EvalID)
	}

	// The replacement fails too: rescheduled again, its history carried on.
	setClientStatus(t, s, structs.AllocClientStatusFailed, next)
	third := waitReplaced(t, st, next.ID)
	if tr := third.RescheduleTracker; tr == nil || len(tr.Events) != 2 || tr.Events[1].PrevAllocID != next.ID {
		t.Fatalf("second tracker = %+v", third.RescheduleTracker)
	}
}

func TestResubmittingUnchangedJobReplacesFailedAllocsNow(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	job := reschedJob("web", constantDelay(time.Hour))
	if _, err := s.RegisterJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	first := liveAlloc(t, s, "web")
	setClientStatus(t, s, structs.AllocClientStatusFailed, first)
	if a, _ := st.Alloc(first.ID); a.NextAllocation != "" {
		t.Fatal("replaced before its delay")
	}
	res, err := s.RegisterJob(ctx, reschedJob("web", constantDelay(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := st.Alloc(first.ID)
	if old.NextAllocation == "" {
		t.Fatal("submitting the job again did not replace its failed allocation")
	}
	next, _ := st.Alloc(old.NextAllocation)
	if next.PreviousAllocation != first.ID || next.EvalID != res.EvalID || next.Job.Version != 0 {
		t.Fatalf("replacement = %+v", next)
	}
}

func TestRescheduleAttemptsAreLimited(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	j := testJob("batch", "raw_exec", 1)
	j.Type = structs.JobTypeBatch
	j.TaskGroups[0].ReschedulePolicy = &structs.ReschedulePolicy{Attempts: ptr(1), Interval: ptr(time.Hour),
		Delay: ptr(50 * time.Millisecond)}
	if _, err := s.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	first := liveAlloc(t, s, "batch")
	setClientStatus(t, s, structs.AllocClientStatusFailed, first)
	second := waitReplaced(t, st, first.ID)
	setClientStatus(t, s, structs.AllocClientStatusFailed, second)
	a, _ := st.Alloc(second.ID)
	if a.FollowupEvalID != "" || a.NextAllocation != "" || a.DesiredStatus != structs.AllocDesiredStatusRun {
		t.Fatalf("allocation past its attempts: %+v", a)
	}
	evals, _ := s.JobEvals(ctx, "batch")
	for _, e := range evals {
		if e.Status == state.EvalStatusPending {
			t.Fatalf("pending evaluation past the attempts: %+v", e)
		}
	}
}

func TestPendingRescheduleSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, reschedJob("web", constantDelay(300*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	first := liveAlloc(t, s, "web")
	setClientStatus(t, s, structs.AllocClientStatusFailed, first)
	s.Shutdown()
	time.Sleep(400 * time.Millisecond) // the timer would have fired: it must not have
	if a, _ := st.Alloc(first.ID); a.NextAllocation != "" {
		t.Fatal("a shut-down server rescheduled")
	}
	startServer(t, st, Config{})
	waitReplaced(t, st, first.ID)
}

func TestStoppedJobCancelsItsReschedule(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, reschedJob("web", constantDelay(100*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	first := liveAlloc(t, s, "web")
	setClientStatus(t, s, structs.AllocClientStatusFailed, first)
	a, _ := st.Alloc(first.ID)
	if _, err := s.StopJob(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err := st.Eval(a.FollowupEvalID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status == state.EvalStatusCanceled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follow-up of a stopped job: %+v", e)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a, _ := st.Alloc(first.ID); a.NextAllocation != "" {
		t.Fatal("a stopped job's allocation was rescheduled")
	}
}
