package jobspecs

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// Nomad's bounds for a reschedule policy that is enabled.
const (
	RescheduleMinDelay    = 5 * time.Second
	RescheduleMinInterval = 15 * time.Second
)

// DefaultReschedule returns Nomad's reschedule policy for a job type:
// service jobs reschedule without limit, waiting 30s doubling up to 1h;
// batch jobs once in 24h after 5s.
func DefaultReschedule(jobType string) structs.ReschedulePolicy {
	if jobType == structs.JobTypeBatch {
		return structs.ReschedulePolicy{Attempts: ptr(1), Interval: ptr(24 * time.Hour), Delay: ptr(5 * time.Second),
			DelayFunction: ptr(structs.RescheduleDelayConstant), MaxDelay: ptr(time.Duration(0)), Unlimited: ptr(false)}
	}
	return structs.ReschedulePolicy{Attempts: ptr(0), Interval: ptr(time.Duration(0)), Delay: ptr(30 * time.Second),
		DelayFunction: ptr(structs.RescheduleDelayExponential), MaxDelay: ptr(time.Hour), Unlimited: ptr(true)}
}

func (d *decoder) decodeReschedule(b *hclsyntax.Block, p path) *structs.ReschedulePolicy {
	d.rec(p, b.DefRange())
	if !d.labels(b) {
		return nil
	}
	c := d.content(b.Body, spec{attrs: []string{"attempts", "interval", "delay", "delay_function", "max_delay", "unlimited"}})
	r := &structs.ReschedulePolicy{}
	d.setIntPtr(c, p, "attempts", &r.Attempts)
	d.setDurPtr(c, p, "interval", &r.Interval)
	d.setDurPtr(c, p, "delay", &r.Delay)
	d.setStrPtr(c, p, "delay_function", &r.DelayFunction)
	d.setDurPtr(c, p, "max_delay", &r.MaxDelay)
	d.setBoolPtr(c, p, "unlimited", &r.Unlimited)
	return r
}

// canonicalizeReschedule merges the job's reschedule block into the
// group's (the group's fields win) and fills the job type's defaults
// field by field, as Nomad does.
func canonicalizeReschedule(job *structs.Job, tg *structs.TaskGroup) {
	if job.IsSystem() {
		return // system jobs are not rescheduled (Nomad sets no policy)
	}
	if tg.ReschedulePolicy == nil {
		tg.ReschedulePolicy = &structs.ReschedulePolicy{}
	}
	r := tg.ReschedulePolicy
	def := DefaultReschedule(job.Type)
	for _, src := range []*structs.ReschedulePolicy{job.Reschedule, &def} {
		if src != nil {
			mergeReschedule(r, src)
		}
	}
}

// mergeReschedule fills dst's unset fields from src.
func mergeReschedule(dst, src *structs.ReschedulePolicy) {
	fillFrom(&dst.Attempts, src.Attempts)
	fillFrom(&dst.Interval, src.Interval)
	fillFrom(&dst.Delay, src.Delay)
	fillFrom(&dst.DelayFunction, src.DelayFunction)
	fillFrom(&dst.MaxDelay, src.MaxDelay)
	fillFrom(&dst.Unlimited, src.Unlimited)
}

// checkReschedule applies Nomad's rules to a reschedule block, given
// first, then the blocks it inherits from (the job's). Unset fields take
// the inherited values and the job type's defaults first, since a block
// only overrides what it names; a policy that reschedules nothing
// (attempts = 0 without unlimited) is valid whatever its other fields.
func checkReschedule(jobType string, p path, report reporter, layers ...*structs.ReschedulePolicy) {
	if len(layers) == 0 || layers[0] == nil || jobType == structs.JobTypeSystem || jobType == structs.JobTypeSysBatch {
		return // system jobs may not have one (checkSystemJob)
	}
	r := structs.ReschedulePolicy{}
	def := DefaultReschedule(jobType)
	for _, src := range append(layers, &def) {
		if src != nil {
			mergeReschedule(&r, src)
		}
	}
	attempts, interval, delay, maxDelay := *r.Attempts, *r.Interval, *r.Delay, *r.MaxDelay
	fn, unlimited := *r.DelayFunction, *r.Unlimited
	if attempts < 0 {
		report(SeverityError, p.attr("attempts"), "Invalid reschedule attempts", fmt.Sprintf("Attempts %d must not be negative.", attempts))
		return
	}
	if attempts == 0 && !unlimited {
		return // rescheduling disabled
	}
	if attempts > 0 && unlimited {
		report(SeverityError, p.attr("unlimited"), "Ambiguous reschedule policy",
			fmt.Sprintf("attempts = %d and unlimited = true contradict each other; set one of them.", attempts))
	}
	switch fn {
	case structs.RescheduleDelayConstant, structs.RescheduleDelayExponential, structs.RescheduleDelayFibonacci:
	default:
		report(SeverityError, p.attr("delay_function"), "Invalid delay_function",
			fmt.Sprintf("delay_function %q is not valid; use \"constant\", \"exponential\" or \"fibonacci\".", fn))
		return
	}
	if delay < RescheduleMinDelay {
		report(SeverityError, p.attr("delay"), "Invalid reschedule delay",
			fmt.Sprintf("Delay %s must be at least %s.", delay, RescheduleMinDelay))
		return
	}
	if fn != structs.RescheduleDelayConstant && maxDelay < delay {
		report(SeverityError, p.attr("max_delay"), "Invalid max_delay",
			fmt.Sprintf("max_delay %s must be at least delay (%s) with delay_function %q.", maxDelay, delay, fn))
		return
	}
	if unlimited {
		return
	}
	if interval < RescheduleMinInterval {
		report(SeverityError, p.attr("interval"), "Invalid reschedule interval",
			fmt.Sprintf("Interval %s must be at least %s when attempts are limited.", interval, RescheduleMinInterval))
		return
	}
	if need := rescheduleSpan(attempts, delay, maxDelay, fn); need > interval {
		report(SeverityError, p.attr("interval"), "Reschedule attempts do not fit in interval", fmt.Sprintf(
			"%d attempts with delay %s (%s, max_delay %s) need %s; set interval to at least that, or lower attempts.",
			attempts, delay, fn, maxDelay, need))
	}
}

// rescheduleSpan is the sum of the delays before the given number of
// attempts, saturating at a year.
func rescheduleSpan(attempts int, delay, maxDelay time.Duration, fn string) time.Duration {
	const ceiling = 365 * 24 * time.Hour
	var total time.Duration
	prev, cur := time.Duration(0), min(delay, ceiling)
	for i := 0; i < attempts && total < ceiling; i++ {
		step := cur
		if fn != structs.RescheduleDelayConstant && step > maxDelay {
			step = maxDelay
		}
		total += step
		switch fn {
		case structs.RescheduleDelayExponential:
			cur = min(cur*2, ceiling)
		case structs.RescheduleDelayFibonacci:
			prev, cur = cur, min(prev+cur, ceiling)
		}
	}
	return min(total, ceiling)
}
