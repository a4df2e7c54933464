package scheduler

import (
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

func ptr[T any](v T) *T { return &v }

func TestReschedulePolicyDefaults(t *testing.T) {
	svc := ReschedulePolicy(job("a", 1), job("a", 1).TaskGroups[0])
	if !*svc.Unlimited || *svc.Delay != 30*time.Second || *svc.MaxDelay != time.Hour ||
		*svc.DelayFunction != structs.RescheduleDelayExponential {
		t.Fatalf("service defaults = %+v", svc)
	}
	b := job("b", 1, func(j *structs.Job) { j.Type = structs.JobTypeBatch })
	batch := ReschedulePolicy(b, b.TaskGroups[0])
	if *batch.Unlimited || *batch.Attempts != 1 || *batch.Interval != 24*time.Hour || *batch.Delay != 5*time.Second ||
		*batch.DelayFunction != structs.RescheduleDelayConstant {
		t.Fatalf("batch defaults = %+v", batch)
	}
	j := job("c", 1, func(j *structs.Job) {
		j.TaskGroups[0].ReschedulePolicy = &structs.ReschedulePolicy{Delay: ptr(time.Second), Unlimited: ptr(false), Attempts: ptr(2)}
	})
	got := ReschedulePolicy(j, j.TaskGroups[0])
	if *got.Delay != time.Second || *got.Unlimited || *got.Attempts != 2 || *got.MaxDelay != time.Hour {
		t.Fatalf("partial policy = %+v", got)
	}
}

func TestNextReschedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ev := func(ago time.Duration, delay time.Duration) *structs.RescheduleEvent {
		return &structs.RescheduleEvent{RescheduleTime: t0.Add(-ago).UnixNano(), Delay: delay}
	}
	pol := func(fn string, unlimited bool, attempts int, interval, delay, maxDelay time.Duration) structs.ReschedulePolicy {
		return structs.ReschedulePolicy{DelayFunction: &fn, Unlimited: &unlimited, Attempts: &attempts,
			Interval: &interval, Delay: &delay, MaxDelay: &maxDelay}
	}
	tests := []struct {
		name   string
		p      structs.ReschedulePolicy
		events []*structs.RescheduleEvent
		want   time.Duration // after the failure; -1 = not eligible
	}{
		{"first exponential", pol("exponential", true, 0, 0, 30*time.Second, time.Hour), nil, 30 * time.Second},
		{"exponential doubles", pol("exponential", true, 0, 0, 30*time.Second, time.Hour),
			[]*structs.RescheduleEvent{ev(time.Minute, 30*time.Second)}, time.Minute},
		{"exponential capped", pol("exponential", true, 0, 0, 30*time.Second, time.Hour),
			[]*structs.RescheduleEvent{ev(time.Minute, 40*time.Minute)}, time.Hour},
		{"capped, ran longer than the cap: reset", pol("exponential", true, 0, 0, 30*time.Second, time.Hour),
			[]*structs.RescheduleEvent{ev(2*time.Hour, time.Hour)}, 30 * time.Second},
		{"fibonacci", pol("fibonacci", true, 0, 0, 5*time.Second, time.Hour),
			[]*structs.RescheduleEvent{ev(time.Minute, 5*time.Second), ev(time.Minute, 10*time.Second)}, 15 * time.Second},
		{"constant", pol("constant", true, 0, 0, 5*time.Second, 0),
			[]*structs.RescheduleEvent{ev(time.Minute, 5*time.Second)}, 5 * time.Second},
		{"attempts used within interval", pol("constant", false, 1, 24*time.Hour, 5*time.Second, 0),
			[]*structs.RescheduleEvent{ev(time.Hour, 5*time.Second)}, -1},
		{"attempt outside interval is forgotten", pol("constant", false, 1, time.Hour, 5*time.Second, 0),
			[]*structs.RescheduleEvent{ev(2*time.Hour, 5*time.Second)}, 5 * time.Second},
		{"zero attempts", pol("constant", false, 0, time.Hour, 5*time.Second, 0), nil, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &structs.Allocation{ModifyTime: t0.UnixNano(), RescheduleTracker: &structs.RescheduleTracker{Events: tc.events}}
			at, ok := NextReschedule(a, tc.p)
			switch {
			case tc.want < 0 && ok:
				t.Fatalf("eligible at %v, want not eligible", at.Sub(t0))
			case tc.want >= 0 && (!ok || at.Sub(t0) != tc.want):
				t.Fatalf("next = %v (eligible %v), want %v", at.Sub(t0), ok, tc.want)
			}
		})
	}
}

func TestProcessReschedulesFailedAllocs(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n := node("n1", "raw_exec")
	j := job("web", 2, withPorts(nil, "http"))
	prev := existing(t, s, j, n)
	t0 := time.Unix(5000, 0)
	failed := *prev[0]
	failed.ClientStatus, failed.ModifyTime = structs.AllocClientStatusFailed, t0.UnixNano()
	allocs := []*structs.Allocation{&failed, prev[1]}

	// Before the delay: a follow-up, nothing placed.
	p, err := s.Process(j, allocs, []*structs.Node{n}, Options{Now: t0.Add(time.Second)})
	if err != nil || len(p.Place) != 0 || len(p.Stop) != 0 || len(p.FollowUps) != 1 ||
		!p.FollowUps[0].WaitUntil.Equal(t0.Add(30*time.Second)) || p.FollowUps[0].Alloc.ID != failed.ID {
		t.Fatalf("before delay: %v %+v", err, p)
	}
	// A follow-up already pending: no second one.
	failed.FollowupEvalID = "e1"
	if p, _ := s.Process(j, allocs, []*structs.Node{n}, Options{Now: t0.Add(time.Second)}); len(p.FollowUps) != 0 {
		t.Fatalf("second follow-up: %+v", p.FollowUps)
	}
	// After the delay: replaced in the same slot.
	p, err = s.Process(j, allocs, []*structs.Node{n}, Options{Now: t0.Add(31 * time.Second)})
	if err != nil || len(p.Place) != 1 || len(p.Stop) != 1 || len(p.Failures) != 0 {
		t.Fatalf("after delay: %v %+v", err, p)
	}
	repl, stop := p.Place[0], p.Stop[0]
	if repl.Name != failed.Name || repl.PreviousAllocation != failed.ID || stop.NextAllocation != repl.ID ||
		stop.DesiredStatus != structs.AllocDesiredStatusStop || stop.DesiredDescription != DescRescheduled {
		t.Fatalf("replacement %+v / stop %+v", repl, stop)
	}
	if tr := repl.RescheduleTracker; tr == nil || len(tr.Events) != 1 || tr.Events[0].PrevAllocID != failed.ID ||
		tr.Events[0].Delay != 30*time.Second {
		t.Fatalf("tracker = %+v", repl.RescheduleTracker)
	}
	// Forced (the job was submitted again): at once, with a fresh history.
	p, err = s.Process(j, allocs, []*structs.Node{n}, Options{Now: t0, ForceReschedule: true})
	if err != nil || len(p.Place) != 1 || p.Place[0].PreviousAllocation != failed.ID || p.Place[0].RescheduleTracker != nil {
		t.Fatalf("forced: %v %+v", err, p)
	}
	// Attempts used up (batch: one per 24 h): the failed allocation stays.
	b := job("batch", 1, func(j *structs.Job) { j.Type = structs.JobTypeBatch })
	bp := existing(t, s, b, n)
	bf := *bp[0]
	bf.ClientStatus, bf.ModifyTime = structs.AllocClientStatusFailed, t0.UnixNano()
	bf.RescheduleTracker = &structs.RescheduleTracker{Events: []*structs.RescheduleEvent{{RescheduleTime: t0.Add(-time.Minute).UnixNano()}}}
	p, err = s.Process(b, []*structs.Allocation{&bf}, []*structs.Node{n}, Options{Now: t0.Add(time.Hour)})
	if err != nil || len(p.Place)+len(p.Stop)+len(p.FollowUps)+len(p.Update) != 0 {
		t.Fatalf("exhausted batch: %v %+v", err, p)
	}
}

func TestReschedulePolicyChangeUpdatesInPlace(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n := node("n1", "raw_exec")
	j := job("web", 1)
	prev := existing(t, s, j, n)
	j2 := job("web", 1, func(j *structs.Job) {
		j.Version = 1
		j.TaskGroups[0].ReschedulePolicy = &structs.ReschedulePolicy{Delay: ptr(time.Minute)}
	})
	p, err := s.Process(j2, prev, []*structs.Node{n}, Options{})
	if err != nil || len(p.Update) != 1 || len(p.Place)+len(p.Stop) != 0 {
		t.Fatalf("policy change: %v %+v", err, p)
	}
}
