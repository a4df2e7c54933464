package command

import (
	"fmt"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// rescheduleKV are Nomad's `alloc status` lines about replacing a failed
// allocation: how many attempts the policy's interval has used, the
// replacement, and when a pending one will be placed (eligible, zero when
// none is pending or it could not be read).
func rescheduleKV(a *nomadapi.Allocation, eligible, now time.Time) [][2]string {
	var out [][2]string
	if used, limit := rescheduleAttempts(a); limit > 0 {
		out = append(out, [2]string{"Reschedule Attempts", fmt.Sprintf("%d/%d", used, limit)})
	}
	if a.NextAllocation != "" {
		out = append(out, [2]string{"Replacement Alloc ID", short(a.NextAllocation)})
	}
	if a.FollowupEvalID != "" && !eligible.IsZero() {
		out = append(out, [2]string{"Reschedule Eligibility", fromNow(eligible, now)})
	}
	return out
}

// rescheduleAttempts counts the reschedules that led to a within its
// group's policy interval, and the policy's limit (0: unlimited or none).
func rescheduleAttempts(a *nomadapi.Allocation) (used, limit int) {
	tg := allocTaskGroup(a)
	if tg == nil || tg.ReschedulePolicy == nil || a.RescheduleTracker == nil {
		return 0, 0
	}
	p := tg.ReschedulePolicy
	if deref(p.Unlimited) || deref(p.Attempts) == 0 {
		return 0, 0
	}
	from := time.Unix(0, a.ModifyTime).Add(-deref(p.Interval))
	for _, ev := range a.RescheduleTracker.Events {
		if ev != nil && !time.Unix(0, ev.RescheduleTime).Before(from) {
			used++
		}
	}
	return used, deref(p.Attempts)
}

// followupTime is when the pending follow-up evaluation id runs; zero if
// it cannot be read.
func followupTime(client *nomadapi.Client, id string) time.Time {
	if id == "" {
		return time.Time{}
	}
	ev, _, err := client.Evaluations().Info(id, nil)
	if err != nil || ev == nil || ev.Status != nomadapi.EvalStatusPending {
		return time.Time{}
	}
	return ev.WaitUntil
}

// futureReschedules are the rows of `job status`'s "Future Rescheduling
// Attempts" section: one per failed allocation whose follow-up evaluation
// (one of the job's evals) is pending.
func futureReschedules(evals []*nomadapi.Evaluation, allocs []*nomadapi.AllocationListStub, now time.Time) []string {
	pending := map[string]time.Time{}
	for _, ev := range evals {
		if ev != nil && ev.Status == nomadapi.EvalStatusPending && !ev.WaitUntil.IsZero() {
			pending[ev.ID] = ev.WaitUntil
		}
	}
	var rows []string
	for _, a := range allocs {
		if when, ok := pending[a.FollowupEvalID]; ok && a.NextAllocation == "" {
			rows = append(rows, row(a.TaskGroup, short(a.FollowupEvalID), fromNow(when, now)))
		}
	}
	return rows
}

// fromNow renders a future time like Nomad's CLI ("25s from now").
func fromNow(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return "now"
	}
	return d.String() + " from now"
}
