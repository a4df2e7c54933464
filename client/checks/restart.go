package checks

import (
	"fmt"
	"sync"
	"time"
)

// taskRestarts is what the runner's checks share about task restarts:
// a restart of a task starts a new grace period for all its checks and
// resets their counters.
type taskRestarts struct {
	mu    sync.Mutex
	epoch map[string]int       // restarts so far, per task
	at    map[string]time.Time // last restart, per task
	busy  map[string]bool      // a restart is in flight
}

// restartCounter is one check's consecutive unhealthy results.
type restartCounter struct {
	unhealthy int
	epoch     int
}

// since returns the start of task's grace period and its restart epoch.
func (t *taskRestarts) since(task string, started time.Time) (time.Time, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.at[task]; ok {
		return at, t.epoch[task]
	}
	return started, t.epoch[task]
}

// begin claims task's restart unless another check restarted it since
// epoch or is restarting it now.
func (t *taskRestarts) begin(task string, epoch int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy[task] || t.epoch[task] != epoch {
		return false
	}
	t.busy[task] = true
	return true
}

// abort releases task's restart claim after a failed restart: no new
// grace period, no reset of the counters.
func (t *taskRestarts) abort(task string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy[task] = false
}

func (t *taskRestarts) done(task string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy[task] = false
	t.epoch[task]++
	t.at[task] = time.Now()
}

func unhealthy(st Status, ignoreWarnings bool) bool {
	return st == StatusCritical || (st == StatusWarning && !ignoreWarnings)
}

// watchRestart applies check_restart to the check's status after a run
// (Nomad's semantics): results within the grace period after the runner
// started or the task last started or restarted (by a check, its restart
// policy or anyone) do not count, nor do those while the task is not
// running (its restart would fail; Nomad stops watching); Limit consecutive
// unhealthy ones restart the task once and reset the count (a restart that
// fails resets nothing: the next unhealthy result tries again). st is the
// check's reported status (after the thresholds), as Nomad sees Consul's.
// The restart runs on the check's goroutine, which waits for it.
func (r *Runner) watchRestart(c *check, st Status, now time.Time) {
	cr := c.def.CheckRestart
	if cr == nil || cr.Limit <= 0 || r.cfg.Restarter == nil {
		return
	}
	task := c.def.Task
	since, epoch := r.restarts.since(task, r.started)
	if epoch != c.restart.epoch {
		c.restart = restartCounter{epoch: epoch}
	}
	startedAt, running := r.cfg.Restarter.Started(task)
	if startedAt.After(since) {
		since = startedAt
	}
	if !running || now.Before(since.Add(cr.Grace)) || !unhealthy(st, cr.IgnoreWarnings) {
		c.restart.unhealthy = 0
		return
	}
	c.restart.unhealthy++
	if c.restart.unhealthy < cr.Limit {
		return
	}
	if !r.restarts.begin(task, epoch) {
		c.restart.unhealthy = 0 // another check restarts the task
		return
	}
	reason := fmt.Sprintf("healthcheck: check %q unhealthy", c.def.Name)
	r.log.Info("restarting task: check unhealthy", "check_id", c.def.ID, "service_id", c.def.ServiceID,
		"task", task, "status", st, "limit", cr.Limit)
	if err := r.cfg.Restarter.Restart(r.ctx, task, reason); err != nil {
		// Nothing restarted: no grace period, and the count stands, so
		// the next unhealthy result tries again.
		r.restarts.abort(task)
		r.log.Error("failed to restart task", "check_id", c.def.ID, "service_id", c.def.ServiceID,
			"task", task, "error", err)
		return
	}
	r.restarts.done(task)
	c.restart.unhealthy = 0
}
