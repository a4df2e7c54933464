package checks

import (
	"context"
	"github.com/meshlet/meshlet/internal/netnsdial"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// maxFirstDelay bounds the jitter before a check's first run.
const maxFirstDelay = 500 * time.Millisecond

// Runner runs an allocation's checks until Stop.
type Runner struct {
	cfg     Config
	log     hclog.Logger
	dial    *netnsdial.Dialer
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time

	mu      sync.Mutex
	results map[string]*Result
	order   []string

	restarts taskRestarts
}

// check is one running check; only its goroutine touches it.
type check struct {
	def       Definition
	probe     probe
	successes int
	failures  int
	restart   restartCounter
}

// New returns a Runner; nothing runs before Start.
func New(cfg Config) *Runner {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{
		cfg:      cfg,
		log:      log.Named("checks"),
		dial:     netnsdial.New(cfg.NetNS),
		ctx:      ctx,
		cancel:   cancel,
		started:  time.Now(),
		results:  map[string]*Result{},
		restarts: taskRestarts{epoch: map[string]int{}, at: map[string]time.Time{}, busy: map[string]bool{}},
	}
}

// Start starts a goroutine per definition; it may be called again to add
// checks. A definition that cannot run (see Definition.Validate, or a
// script check without Config.Exec) stays critical with the reason as its
// output; one without an ID, or with an ID already running, is logged and
// skipped.
func (r *Runner) Start(defs []Definition) {
	for _, d := range defs {
		if d.ID == "" {
			r.log.Error("check not started", "service_id", d.ServiceID, "error", d.Validate())
			continue
		}
		if !r.addResult(d) {
			r.log.Error("check not started: duplicate ID", "check_id", d.ID, "service_id", d.ServiceID)
			continue
		}
		p, err := r.prepare(d)
		if err != nil {
			r.log.Error("check not started", "check_id", d.ID, "service_id", d.ServiceID, "error", err)
			r.record(d, StatusCritical, err.Error())
			continue
		}
		r.wg.Add(1)
		go r.run(&check{def: d, probe: p})
	}
}

func (r *Runner) prepare(d Definition) (probe, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if cr := d.CheckRestart; cr != nil && cr.Limit > 0 && r.cfg.Restarter == nil {
		r.log.Warn("check_restart ignored: tasks cannot be restarted here", "check_id", d.ID, "task", d.Task)
	}
	return newProbe(d, r.dial.DialContext, r.cfg.Exec)
}

// addResult sets d's initial result; false if its ID is taken.
func (r *Runner) addResult(d Definition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.results[d.ID]; ok {
		return false
	}
	r.results[d.ID] = &Result{CheckID: d.ID, Name: d.Name, ServiceID: d.ServiceID, Status: d.StartingStatus(),
		Timestamp: time.Now()}
	r.order = append(r.order, d.ID)
	return true
}

// Stop stops every check and waits for their goroutines (a run in flight
// is cancelled; its result is dropped). It is safe to call more than once.
func (r *Runner) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Results returns every check's current result, in Start's order.
func (r *Runner) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Result, 0, len(r.order))
	for _, id := range r.order {
		out = append(out, *r.results[id])
	}
	return out
}

func firstDelay(interval time.Duration) time.Duration {
	if limit := min(interval, maxFirstDelay); limit > 0 {
		return rand.N(limit)
	}
	return 0
}

// run is a check's goroutine: a run, then wait Interval, until Stop.
func (r *Runner) run(c *check) {
	defer r.wg.Done()
	defer c.probe.close()
	timer := time.NewTimer(firstDelay(c.def.interval()))
	defer timer.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, c.def.timeout())
		st, out := c.probe.run(ctx)
		cancel()
		if r.ctx.Err() != nil {
			return
		}
		if rec, ok := c.apply(st); ok {
			r.record(c.def, rec, out)
		} else {
			r.log.Trace("check status update skipped: threshold not reached", "check_id", c.def.ID,
				"status", st, "successes", c.successes, "failures", c.failures)
		}
		r.watchRestart(c, r.status(c.def.ID), time.Now())
		timer.Reset(c.def.interval())
	}
}

// apply counts a result with Consul's thresholds (warning counts as a
// success) and returns the status to record: st once SuccessBeforePassing
// or FailuresBeforeCritical results in a row say so, warning after
// FailuresBeforeWarning failures in a row; false while no threshold is
// reached.
func (c *check) apply(st Status) (Status, bool) {
	if st != StatusCritical {
		c.successes++
		c.failures = 0
		return st, c.successes >= max(c.def.SuccessBeforePassing, 1)
	}
	c.failures++
	c.successes = 0
	if c.failures >= max(c.def.FailuresBeforeCritical, 1) {
		return StatusCritical, true
	}
	if w := c.def.FailuresBeforeWarning; w > 0 && c.failures >= w {
		return StatusWarning, true
	}
	return st, false
}

// record sets a check's result and tells OnChange if it changed.
func (r *Runner) record(d Definition, st Status, out string) {
	r.mu.Lock()
	res := r.results[d.ID]
	changed := res.Status != st || res.Output != out
	res.Status, res.Output, res.Timestamp = st, out, time.Now()
	snapshot := *res
	r.mu.Unlock()
	if !changed {
		return
	}
	r.log.Debug("check result changed", "check_id", d.ID, "service_id", d.ServiceID, "status", st)
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(snapshot)
	}
}

func (r *Runner) status(id string) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.results[id].Status
}
