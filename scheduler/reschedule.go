package scheduler

import (
	"time"

	"github.com/meshlet/meshlet/structs"
)

// DescRescheduled is set on a failed allocation the plan replaced, as Nomad
// words it.
const DescRescheduled = "alloc was rescheduled because it failed"

// maxUnlimitedEvents bounds the reschedule history carried by allocations
// of an unlimited policy (Nomad keeps 5).
const maxUnlimitedEvents = 5

// ReschedulePolicy returns the group's reschedule policy with every unset
// field filled with the job type's defaults, as Nomad's: service jobs
// reschedule without limit with an exponential delay from 30 s up to 1 h;
// batch jobs once per 24 h after a constant 5 s.
func ReschedulePolicy(job *structs.Job, tg *structs.TaskGroup) structs.ReschedulePolicy {
	attempts, interval, delay, maxDelay := 0, time.Duration(0), 30*time.Second, time.Hour
	fn, unlimited := structs.RescheduleDelayExponential, true
	if job.Type == structs.JobTypeBatch {
		attempts, interval, delay, maxDelay = 1, 24*time.Hour, 5*time.Second, 0
		fn, unlimited = structs.RescheduleDelayConstant, false
	}
	out := structs.ReschedulePolicy{Attempts: &attempts, Interval: &interval, Delay: &delay,
		DelayFunction: &fn, MaxDelay: &maxDelay, Unlimited: &unlimited}
	p := tg.ReschedulePolicy
	if p == nil {
		return out
	}
	if p.Attempts != nil {
		out.Attempts = p.Attempts
	}
	if p.Interval != nil {
		out.Interval = p.Interval
	}
	if p.Delay != nil {
		out.Delay = p.Delay
	}
	if p.DelayFunction != nil && *p.DelayFunction != "" {
		out.DelayFunction = p.DelayFunction
	}
	if p.MaxDelay != nil {
		out.MaxDelay = p.MaxDelay
	}
	if p.Unlimited != nil {
		out.Unlimited = p.Unlimited
	}
	return out
}

// NextReschedule returns when the failed allocation a may be replaced under
// policy p, and false when its attempts are used up.
func NextReschedule(a *structs.Allocation, p structs.ReschedulePolicy) (time.Time, bool) {
	var events []*structs.RescheduleEvent
	if a.RescheduleTracker != nil {
		events = a.RescheduleTracker.Events
	}
	failed := failedAt(a)
	if !*p.Unlimited {
		if *p.Attempts <= 0 {
			return time.Time{}, false
		}
		n := 0
		for _, e := range events {
			if failed.Sub(time.Unix(0, e.RescheduleTime)) < *p.Interval {
				n++
			}
		}
		if n >= *p.Attempts {
			return time.Time{}, false
		}
	}
	return failed.Add(nextDelay(events, p, failed)), true
}

// nextDelay computes the delay before the next attempt (Nomad's NextDelay):
// constant, doubling or Fibonacci from the previous delays, capped at
// MaxDelay; once capped, an allocation that ran longer than the cap since
// its last reschedule starts again from Delay.
func nextDelay(events []*structs.RescheduleEvent, p structs.ReschedulePolicy, failed time.Time) time.Duration {
	d := *p.Delay
	if n := len(events); n > 0 {
		switch *p.DelayFunction {
		case structs.RescheduleDelayExponential:
			d = events[n-1].Delay * 2
		case structs.RescheduleDelayFibonacci:
			if n >= 2 {
				d = events[n-1].Delay + events[n-2].Delay
			} else {
				d = events[n-1].Delay
			}
		}
	}
	if d <= 0 {
		d = *p.Delay
	}
	if limit := *p.MaxDelay; limit > 0 && d > limit {
		d = limit
		if n := len(events); n > 0 && failed.Sub(time.Unix(0, events[n-1].RescheduleTime)) > limit {
			d = *p.Delay
		}
	}
	return d
}

// failedAt is when the allocation failed: its last task's finish time, or
// its last modification.
func failedAt(a *structs.Allocation) time.Time {
	var t time.Time
	for _, ts := range a.TaskStates {
		if ts != nil && ts.FinishedAt.After(t) {
			t = ts.FinishedAt
		}
	}
	if t.IsZero() {
		t = time.Unix(0, a.ModifyTime)
	}
	return t
}

// rescheduleTracker returns the history the replacement of prev carries.
func rescheduleTracker(prev *structs.Allocation, p structs.ReschedulePolicy, now time.Time) *structs.RescheduleTracker {
	var events []*structs.RescheduleEvent
	if prev.RescheduleTracker != nil {
		for _, e := range prev.RescheduleTracker.Events {
			if *p.Unlimited || now.Sub(time.Unix(0, e.RescheduleTime)) < *p.Interval {
				events = append(events, e)
			}
		}
	}
	delay := nextDelay(events, p, failedAt(prev))
	events = append(events, &structs.RescheduleEvent{RescheduleTime: now.UnixNano(), PrevAllocID: prev.ID,
		PrevNodeID: prev.NodeID, Delay: delay})
	if *p.Unlimited && len(events) > maxUnlimitedEvents {
		events = events[len(events)-maxUnlimitedEvents:]
	}
	return &structs.RescheduleTracker{Events: events}
}
