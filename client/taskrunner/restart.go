package taskrunner

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// SidecarImmediateRestarts is how many restarts (within the policy's
// interval) of a connect sidecar proxy happen at once: every request
// through the mesh fails while the sidecar is down, so waiting the group's
// delay (15 s by default) before bringing it back is an outage.
const SidecarImmediateRestarts = 2

// ReasonUnrecoverable starts the reason of the event that fails a task at
// once on an unrecoverable error (Nomad's wording).
const ReasonUnrecoverable = "Error was unrecoverable"

// restartJitter is the fraction of the delay added at random (Nomad: 25 %).
const restartJitter = 0.25

// RestartPolicy is a fully resolved restart block.
type RestartPolicy struct {
	Attempts int
	Interval time.Duration
	Delay    time.Duration
	Mode     string
}

// DefaultRestartPolicy returns Nomad's defaults for a job type.
func DefaultRestartPolicy(jobType string) RestartPolicy {
	if jobType == structs.JobTypeBatch || jobType == structs.JobTypeSysBatch {
		return RestartPolicy{Attempts: 3, Interval: 24 * time.Hour, Delay: 15 * time.Second, Mode: structs.RestartPolicyModeFail}
	}
	return RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: structs.RestartPolicyModeFail}
}

// ResolveRestartPolicy merges the job-type defaults, the group's restart
// block and the task's (most specific wins, field by field).
func ResolveRestartPolicy(job *structs.Job, tg *structs.TaskGroup, task *structs.Task) RestartPolicy {
	jobType := structs.JobTypeService
	if job != nil && job.Type != "" {
		jobType = job.Type
	}
	p := DefaultRestartPolicy(jobType)
	for _, rp := range []*structs.RestartPolicy{groupPolicy(tg), taskPolicy(task)} {
		if rp == nil {
			continue
		}
		if rp.Attempts != nil {
			p.Attempts = *rp.Attempts
		}
		if rp.Interval != nil {
			p.Interval = *rp.Interval
		}
		if rp.Delay != nil {
			p.Delay = *rp.Delay
		}
		if rp.Mode != nil && *rp.Mode != "" {
			p.Mode = *rp.Mode
		}
	}
	return p
}

func groupPolicy(tg *structs.TaskGroup) *structs.RestartPolicy {
	if tg == nil {
		return nil
	}
	return tg.RestartPolicy
}

func taskPolicy(t *structs.Task) *structs.RestartPolicy {
	if t == nil {
		return nil
	}
	return t.RestartPolicy
}

// Decision is what to do after a task exited or failed to start.
type Decision struct {
	Restart bool
	Delay   time.Duration
	// Failed marks the task failed when it is not restarted.
	Failed bool
	// Reason explains a restart in "delay" mode or why there is no restart.
	Reason string
}

// Tracker counts restarts within the policy's interval, like Nomad's
// RestartTracker. It is not safe for concurrent use (one per task runner).
type Tracker struct {
	policy RestartPolicy
	batch  bool
	count  int
	start  time.Time
	// immediate restarts happen without delay; the ones after wait the
	// policy's delay, doubled for each further restart (capped at the
	// policy's interval). Set by NewSidecarTracker.
	immediate int
	// rand returns a value in [0,n); nil disables jitter.
	rand func(n int64) int64
}

// NewTracker returns a tracker for policy; batch tasks that exit 0 are
// complete rather than restarted.
func NewTracker(policy RestartPolicy, batch bool, rand func(n int64) int64) *Tracker {
	return &Tracker{policy: policy, batch: batch, rand: rand}
}

// NewSidecarTracker returns the tracker of a connect sidecar proxy: its
// first SidecarImmediateRestarts restarts within the policy's interval are
// immediate, later ones back off from the policy's delay. Attempts, interval
// and mode apply as for any task.
func NewSidecarTracker(policy RestartPolicy, rand func(n int64) int64) *Tracker {
	return &Tracker{policy: policy, rand: rand, immediate: SidecarImmediateRestarts}
}

// Next decides after an exit (res) or a start failure (res.Err set). An
// unrecoverable error (driver.ErrUnrecoverable: a missing driver, an
// invalid config) fails the task at once, whatever the policy.
func (t *Tracker) Next(now time.Time, res *driver.ExitResult) Decision {
	if res != nil && errors.Is(res.Err, driver.ErrUnrecoverable) {
		return Decision{Failed: true, Reason: ReasonUnrecoverable + ": " + res.Err.Error()}
	}
	if t.batch && res != nil && res.Successful() {
		return Decision{}
	}
	failed := res == nil || !res.Successful()
	p := t.policy
	if t.start.IsZero() || now.Sub(t.start) > p.Interval {
		t.count, t.start = 0, now
	}
	t.count++
	if t.count <= p.Attempts {
		return Decision{Restart: true, Delay: t.delay()}
	}
	if p.Attempts == 0 && p.Mode != structs.RestartPolicyModeDelay {
		return Decision{Failed: failed || !t.batch, Reason: "Policy allows no restarts"}
	}
	reason := fmt.Sprintf("Exceeded allowed attempts %d in interval %v and mode is %q", p.Attempts, p.Interval, p.Mode)
	if p.Mode == structs.RestartPolicyModeDelay {
		wait := t.start.Add(p.Interval).Sub(now)
		if wait < p.Delay {
			wait = p.Delay
		}
		t.count, t.start = 0, now.Add(wait)
		return Decision{Restart: true, Delay: wait, Reason: reason}
	}
	// A service task that keeps exiting 0 has still exhausted its policy.
	return Decision{Failed: true, Reason: reason}
}

// delay is the wait before the count-th restart within the interval.
func (t *Tracker) delay() time.Duration {
	if t.immediate == 0 {
		return t.jittered(t.policy.Delay)
	}
	if t.count <= t.immediate {
		return 0
	}
	d := t.policy.Delay
	for i := t.count - t.immediate; i > 1 && d < t.policy.Interval; i-- {
		d *= 2
	}
	if t.policy.Interval > 0 && d > t.policy.Interval {
		d = t.policy.Interval
	}
	return t.jittered(d)
}

func (t *Tracker) jittered(d time.Duration) time.Duration {
	if t.rand == nil || d <= 0 {
		return d
	}
	span := int64(float64(d) * restartJitter)
	if span <= 0 {
		return d
	}
	return d + time.Duration(t.rand(span))
}
