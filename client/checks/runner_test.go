package checks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestThresholds runs an http check against a server that answers a fixed
// sequence of codes: with success_before_passing 2 and
// failures_before_critical 3 the status may only change on the 2nd, 5th
// and 7th request.
func TestThresholds(t *testing.T) {
	codes := []int{200, 200, 500, 500, 500, 200, 200}
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		code := codes[min(served, len(codes)-1)]
		served++
		mu.Unlock()
		w.WriteHeader(code)
	}))
	defer srv.Close()
	servedNow := func() int { mu.Lock(); defer mu.Unlock(); return served }

	type change struct {
		status Status
		served int
	}
	var cmu sync.Mutex
	var got []change
	onChange := func(r Result) {
		cmu.Lock()
		defer cmu.Unlock()
		got = append(got, change{r.Status, servedNow()})
	}
	d := httpDef(t, srv.URL)
	d.Interval = 15 * time.Millisecond
	d.SuccessBeforePassing, d.FailuresBeforeCritical = 2, 3
	r := startRunner(t, Config{OnChange: onChange}, d)
	if res := result(t, r, "c1"); res.Status != StatusCritical {
		t.Fatalf("initial status %s, want critical", res.Status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for servedNow() < len(codes)+3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r.Stop()
	cmu.Lock()
	defer cmu.Unlock()
	want := []change{{StatusPassing, 2}, {StatusCritical, 5}, {StatusPassing, 7}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes (status, requests served) = %v, want %v", got, want)
	}
}

// TestApplyThresholds checks the counting rules alone, warning included.
func TestApplyThresholds(t *testing.T) {
	c := &check{def: Definition{SuccessBeforePassing: 2, FailuresBeforeCritical: 2}}
	seq := []struct {
		st   Status
		want bool
	}{
		{StatusWarning, false}, {StatusPassing, true}, {StatusCritical, false}, {StatusPassing, false},
		{StatusCritical, false}, {StatusCritical, true}, {StatusCritical, true}, {StatusWarning, false}, {StatusWarning, true},
	}
	for i, s := range seq {
		if got, ok := c.apply(s.st); ok != s.want || (ok && got != s.st) {
			t.Fatalf("step %d (%s): apply = %s %v, want %v", i, s.st, got, ok, s.want)
		}
	}
	c = &check{}
	if _, ok := c.apply(StatusCritical); !ok {
		t.Fatal("zero thresholds must apply every result")
	}
	if _, ok := c.apply(StatusPassing); !ok {
		t.Fatal("zero thresholds must apply every result")
	}
}

// TestFailuresBeforeWarning: Consul's failures_before_warning turns a
// failing check warning before failures_before_critical turns it critical;
// a success starts the count again.
func TestFailuresBeforeWarning(t *testing.T) {
	c := &check{def: Definition{FailuresBeforeWarning: 2, FailuresBeforeCritical: 4}}
	type step struct {
		in   Status
		want Status // "" = nothing recorded
	}
	seq := []step{
		{StatusCritical, ""}, {StatusCritical, StatusWarning}, {StatusCritical, StatusWarning}, {StatusCritical, StatusCritical},
		{StatusPassing, StatusPassing}, {StatusCritical, ""}, {StatusCritical, StatusWarning},
	}
	for i, s := range seq {
		got, ok := c.apply(s.in)
		if !ok {
			got = ""
		}
		if got != s.want {
			t.Fatalf("step %d (%s): recorded %q, want %q", i, s.in, got, s.want)
		}
	}
	// Without failures_before_critical, critical comes first.
	c = &check{def: Definition{FailuresBeforeWarning: 1}}
	if got, ok := c.apply(StatusCritical); !ok || got != StatusCritical {
		t.Fatalf("warning 1, critical unset: %s %v, want critical", got, ok)
	}
}

// blockingExec blocks every run until release is closed, then answers code.
func blockingExec(release <-chan struct{}, code int) *fakeExec {
	return &fakeExec{fn: func(ctx context.Context, n int) ([]byte, int, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		return []byte("out"), code, nil
	}}
}

func scriptDef(id string) Definition {
	return Definition{ID: id, Name: id + "-name", ServiceID: "svc", Type: TypeScript, Command: "check", Task: "web",
		Interval: 10 * time.Millisecond, Timeout: 5 * time.Second}
}

func TestInitialStatus(t *testing.T) {
	release := make(chan struct{})
	ex := blockingExec(release, 2)
	a, b := scriptDef("a"), scriptDef("b")
	a.InitialStatus = StatusPassing
	r := startRunner(t, Config{Exec: ex}, a, b)
	if got := r.Results(); len(got) != 2 || got[0].Status != StatusPassing || got[1].Status != StatusCritical ||
		got[0].CheckID != "a" || got[0].Name != "a-name" || got[0].ServiceID != "svc" {
		t.Fatalf("initial results %+v", got)
	}
	close(release)
	waitFor(t, r, "a", "critical after exit 2", func(res Result) bool { return res.Status == StatusCritical })
}

func TestOnChangeOnlyOnChanges(t *testing.T) {
	var mu sync.Mutex
	output := "same"
	ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) {
		mu.Lock()
		defer mu.Unlock()
		return []byte(output), 0, nil
	}}
	var ch changes
	r := startRunner(t, Config{Exec: ex, OnChange: ch.add}, scriptDef("s"))
	for ex.count() < 6 {
		time.Sleep(5 * time.Millisecond)
	}
	if got := ch.get(); len(got) != 1 || got[0].Status != StatusPassing || got[0].Output != "same" || got[0].CheckID != "s" {
		t.Fatalf("after %d identical runs OnChange saw %+v, want one passing", ex.count(), got)
	}
	mu.Lock()
	output = "different"
	mu.Unlock()
	waitFor(t, r, "s", "new output", func(res Result) bool { return res.Output == "different" })
	n := ex.count()
	for ex.count() < n+4 {
		time.Sleep(5 * time.Millisecond)
	}
	if got := ch.get(); len(got) != 2 || got[1].Output != "different" {
		t.Fatalf("OnChange saw %+v, want a second call for the new output only", got)
	}
}

func TestStopWaits(t *testing.T) {
	ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) { return nil, 0, nil }}
	r := startRunner(t, Config{Exec: ex}, scriptDef("s"))
	for ex.count() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	n := ex.count()
	time.Sleep(50 * time.Millisecond)
	if ex.count() != n {
		t.Fatalf("checks ran after Stop: %d then %d", n, ex.count())
	}
	r.Stop() // twice is fine
}

func TestInvalidAndDuplicateChecks(t *testing.T) {
	bad := Definition{ID: "bad", Type: "docker"}
	noExec := scriptDef("noexec")
	dup := Definition{ID: "bad", Type: TypeTCP, Address: "127.0.0.1", Port: 1, InitialStatus: StatusPassing}
	r := startRunner(t, Config{}, bad, noExec, dup, Definition{Type: TypeTCP})
	got := r.Results()
	if len(got) != 2 {
		t.Fatalf("results %+v, want bad and noexec only", got)
	}
	if got[0].Status != StatusCritical || !strings.Contains(got[0].Output, "unsupported check type") {
		t.Fatalf("bad: %+v", got[0])
	}
	if got[1].Status != StatusCritical || !strings.Contains(got[1].Output, "no exec") {
		t.Fatalf("noexec: %+v", got[1])
	}
}

func TestCheckRestart(t *testing.T) {
	ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) { return []byte("down"), 2, nil }}
	rs := &fakeRestarter{exec: ex}
	d := scriptDef("s")
	d.CheckRestart = &CheckRestart{Limit: 2}
	r := startRunner(t, Config{Exec: ex, Restarter: rs}, d)
	deadline := time.Now().Add(5 * time.Second)
	for len(rs.get()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	calls := rs.get()
	if len(calls) < 2 {
		t.Fatalf("restarts %+v, want at least 2", calls)
	}
	if calls[0].task != "web" || !strings.Contains(calls[0].reason, `"s-name" unhealthy`) {
		t.Fatalf("restart %+v", calls[0])
	}
	// Restarted after the 2nd failure, then 2 failures later again.
	if calls[0].execs != 2 || calls[1].execs != 4 {
		t.Fatalf("restarts after %d and %d runs, want 2 and 4", calls[0].execs, calls[1].execs)
	}
}

func TestCheckRestartGrace(t *testing.T) {
	ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) { return nil, 2, nil }}
	rs := &fakeRestarter{exec: ex}
	d := scriptDef("s")
	grace := 300 * time.Millisecond
	d.CheckRestart = &CheckRestart{Limit: 2, Grace: grace}
	start := time.Now()
	r := startRunner(t, Config{Exec: ex, Restarter: rs}, d)
	deadline := time.Now().Add(5 * time.Second)
	for len(rs.get()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	calls := rs.get()
	if len(calls) < 2 {
		t.Fatalf("restarts %+v, want 2", calls)
	}
	if calls[0].at.Before(start.Add(grace)) || calls[0].execs <= 2 {
		t.Fatalf("first restart %s after start, after %d runs: inside the grace period", calls[0].at.Sub(start), calls[0].execs)
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < grace {
		t.Fatalf("second restart %s after the first: grace restarts after a restart", gap)
	}
}

func TestCheckRestartWarnings(t *testing.T) {
	for _, ignore := range []bool{true, false} {
		t.Run(fmt.Sprint("ignore=", ignore), func(t *testing.T) {
			ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) { return nil, 1, nil }}
			rs := &fakeRestarter{exec: ex}
			d := scriptDef("s")
			d.CheckRestart = &CheckRestart{Limit: 2, IgnoreWarnings: ignore}
			r := startRunner(t, Config{Exec: ex, Restarter: rs}, d)
			waitFor(t, r, "s", "warning", func(res Result) bool { return res.Status == StatusWarning })
			for ex.count() < 8 {
				time.Sleep(5 * time.Millisecond)
			}
			r.Stop()
			if n := len(rs.get()); ignore != (n == 0) {
				t.Fatalf("ignore_warnings=%v: %d restarts after %d warnings", ignore, n, ex.count())
			}
		})
	}
}

// A restart of a task resets the counts of all its checks: two checks of
// one task failing together restart it once per Limit failures, not twice.
func TestCheckRestartSharedTask(t *testing.T) {
	rs := &fakeRestarter{}
	r := New(Config{Restarter: rs})
	defer r.Stop()
	mk := func(id, task string) *check {
		d := scriptDef(id)
		d.Task = task
		d.CheckRestart = &CheckRestart{Limit: 2}
		return &check{def: d}
	}
	a, b, other := mk("a", "web"), mk("b", "web"), mk("o", "db")
	steps := []struct {
		c     *check
		st    Status
		total int // restarts so far
	}{
		{a, StatusCritical, 0}, {b, StatusCritical, 0}, {other, StatusCritical, 0},
		{a, StatusCritical, 1},    // a's 2nd: restart web
		{b, StatusCritical, 1},    // b's count was reset by the restart
		{other, StatusPassing, 1}, // db's count resets on a healthy result
		{other, StatusCritical, 1},
		{b, StatusCritical, 2}, // b's 2nd since the restart
		{other, StatusCritical, 3},
	}
	for i, s := range steps {
		r.watchRestart(s.c, s.st, time.Now())
		if n := len(rs.get()); n != s.total {
			t.Fatalf("step %d (%s %s): %d restarts, want %d", i, s.c.def.ID, s.st, n, s.total)
		}
	}
	if calls := rs.get(); calls[0].task != "web" || calls[1].task != "web" || calls[2].task != "db" {
		t.Fatalf("restarted %+v", calls)
	}
}

// check_restart's grace runs from the task's latest start, as Nomad's
// ("after a task starts or restarts"), whoever started it: a task that
// starts long after its checks (slow prestart tasks, an image pull) or that
// its restart policy brought back after a crash gets its grace, and results
// do not count while the task is not running.
func TestCheckRestartGraceFromTaskStart(t *testing.T) {
	rs := &fakeRestarter{}
	r := New(Config{Restarter: rs})
	defer r.Stop()
	t0 := r.started
	d := scriptDef("s")
	d.CheckRestart = &CheckRestart{Limit: 1, Grace: time.Minute}
	c := &check{def: d}
	steps := []struct {
		name      string
		startedAt time.Duration // since t0; <0: not running
		now       time.Duration
		total     int // restarts so far
	}{
		{"not started yet, past the grace since the checks started", -1, 2 * time.Minute, 0},
		{"started, within its grace", 2 * time.Minute, 2*time.Minute + 30*time.Second, 0},
		{"past its grace", 2 * time.Minute, 3*time.Minute + time.Second, 1},
		{"crashed, waiting for its policy's restart", -1, 4 * time.Minute, 1},
		{"restarted by its policy, within its grace", 5 * time.Minute, 5*time.Minute + 10*time.Second, 1},
		{"past that grace", 5 * time.Minute, 6*time.Minute + time.Second, 2},
	}
	for _, s := range steps {
		if s.startedAt < 0 {
			rs.setTask(time.Time{}, false)
		} else {
			rs.setTask(t0.Add(s.startedAt), true)
		}
		r.watchRestart(c, StatusCritical, t0.Add(s.now))
		if n := len(rs.get()); n != s.total {
			t.Fatalf("%s: %d restarts, want %d", s.name, n, s.total)
		}
	}
}

// A restart that fails starts no grace period and keeps the count: the
// next unhealthy run tries again.
func TestCheckRestartFailedRestart(t *testing.T) {
	ex := &fakeExec{fn: func(context.Context, int) ([]byte, int, error) { return nil, 2, nil }}
	rs := &fakeRestarter{exec: ex, fail: 1}
	d := scriptDef("s")
	d.CheckRestart = &CheckRestart{Limit: 3, Grace: 100 * time.Millisecond}
	r := startRunner(t, Config{Exec: ex, Restarter: rs}, d)
	deadline := time.Now().Add(5 * time.Second)
	for len(rs.get()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	calls := rs.get()
	if len(calls) < 3 {
		t.Fatalf("restarts %+v, want 3", calls)
	}
	if calls[1].execs != calls[0].execs+1 {
		t.Fatalf("after a failed restart at run %d the next try came at run %d, want the next run", calls[0].execs, calls[1].execs)
	}
	if gap := calls[2].at.Sub(calls[1].at); gap < 100*time.Millisecond || calls[2].execs < calls[1].execs+3 {
		t.Fatalf("after a successful restart the next came %s and %d runs later: want the grace and 3 runs",
			gap, calls[2].execs-calls[1].execs)
	}
}

// A check of a group service without a task restarts the allocation's
// main tasks: the Restarter is asked for task "".
func TestCheckRestartWithoutTask(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	rs := &fakeRestarter{}
	d := httpDef(t, srv.URL)
	d.Interval = 10 * time.Millisecond
	d.CheckRestart = &CheckRestart{Limit: 2}
	r := startRunner(t, Config{Restarter: rs}, d)
	deadline := time.Now().Add(5 * time.Second)
	for len(rs.get()) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	if calls := rs.get(); len(calls) == 0 || calls[0].task != "" {
		t.Fatalf("restarts %+v, want one of task \"\"", calls)
	}
}
