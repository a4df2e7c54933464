package taskrunner

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

func dur(d time.Duration) *time.Duration { return &d }
func ip(i int) *int                      { return &i }
func sp(s string) *string                { return &s }

func TestResolveRestartPolicy(t *testing.T) {
	tests := []struct {
		name string
		job  *structs.Job
		tg   *structs.TaskGroup
		task *structs.Task
		want RestartPolicy
	}{
		{"service defaults", &structs.Job{Type: "service"}, nil, nil, RestartPolicy{2, 30 * time.Minute, 15 * time.Second, "fail"}},
		{"batch defaults", &structs.Job{Type: "batch"}, nil, nil, RestartPolicy{3, 24 * time.Hour, 15 * time.Second, "fail"}},
		{"group overrides", &structs.Job{}, &structs.TaskGroup{RestartPolicy: &structs.RestartPolicy{Attempts: ip(5), Mode: sp("delay")}}, nil,
			RestartPolicy{5, 30 * time.Minute, 15 * time.Second, "delay"}},
		{"task overrides group", &structs.Job{}, &structs.TaskGroup{RestartPolicy: &structs.RestartPolicy{Attempts: ip(5), Delay: dur(time.Second)}},
			&structs.Task{RestartPolicy: &structs.RestartPolicy{Attempts: ip(1)}}, RestartPolicy{1, 30 * time.Minute, time.Second, "fail"}},
	}
	for _, tc := range tests {
		if got := ResolveRestartPolicy(tc.job, tc.tg, tc.task); got != tc.want {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
		}
	}
}

func TestTracker(t *testing.T) {
	fail := &driver.ExitResult{ExitCode: 1}
	ok := &driver.ExitResult{}
	startErr := &driver.ExitResult{Err: errors.New("boom")}
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration // since t0
		res  *driver.ExitResult
		want Decision
	}
	pol := RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: "fail"}
	tests := []struct {
		name  string
		pol   RestartPolicy
		batch bool
		steps []step
	}{
		{"fail mode exhausts", pol, false, []step{
			{0, fail, Decision{Restart: true, Delay: 15 * time.Second}},
			{time.Minute, fail, Decision{Restart: true, Delay: 15 * time.Second}},
			{2 * time.Minute, fail, Decision{Failed: true, Reason: `Exceeded allowed attempts 2 in interval 30m0s and mode is "fail"`}},
		}},
		{"interval resets the count", pol, false, []step{
			{0, fail, Decision{Restart: true, Delay: 15 * time.Second}},
			{time.Minute, fail, Decision{Restart: true, Delay: 15 * time.Second}},
			{40 * time.Minute, fail, Decision{Restart: true, Delay: 15 * time.Second}},
		}},
		{"start errors count like failures", pol, false, []step{
			{0, startErr, Decision{Restart: true, Delay: 15 * time.Second}},
			{0, startErr, Decision{Restart: true, Delay: 15 * time.Second}},
			{0, startErr, Decision{Failed: true, Reason: `Exceeded allowed attempts 2 in interval 30m0s and mode is "fail"`}},
		}},
		{"unrecoverable start errors fail at once", RestartPolicy{Attempts: 3, Interval: time.Hour, Delay: time.Second, Mode: "delay"}, false, []step{
			{0, &driver.ExitResult{Err: fmt.Errorf("failed to start task: %w", driver.Unrecoverable(errors.New("config: command is required")))},
				Decision{Failed: true, Reason: "Error was unrecoverable: failed to start task: config: command is required"}},
		}},
		{"service exit 0 restarts", pol, false, []step{{0, ok, Decision{Restart: true, Delay: 15 * time.Second}}}},
		{"batch exit 0 completes", pol, true, []step{{0, ok, Decision{}}}},
		{"no attempts", RestartPolicy{Attempts: 0, Interval: time.Minute, Delay: time.Second, Mode: "fail"}, false, []step{
			{0, fail, Decision{Failed: true, Reason: "Policy allows no restarts"}}}},
		{"delay mode waits for the interval", RestartPolicy{Attempts: 1, Interval: 10 * time.Minute, Delay: time.Second, Mode: "delay"}, false, []step{
			{0, fail, Decision{Restart: true, Delay: time.Second}},
			{time.Minute, fail, Decision{Restart: true, Delay: 9 * time.Minute, Reason: `Exceeded allowed attempts 1 in interval 10m0s and mode is "delay"`}},
			{10 * time.Minute, fail, Decision{Restart: true, Delay: time.Second}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.pol, tc.batch, nil)
			for i, s := range tc.steps {
				if got := tr.Next(t0.Add(s.at), s.res); got != s.want {
					t.Fatalf("step %d: got %+v want %+v", i, got, s.want)
				}
			}
		})
	}
}

func TestTrackerJitter(t *testing.T) {
	var asked int64
	tr := NewTracker(RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 4 * time.Second, Mode: "fail"}, false,
		func(n int64) int64 { asked = n; return n - 1 })
	d := tr.Next(time.Now(), &driver.ExitResult{ExitCode: 1})
	if asked != int64(time.Second) || d.Delay != 5*time.Second-1 {
		t.Fatalf("jitter span %v, delay %v", time.Duration(asked), d.Delay)
	}
}

// TestSidecarTracker: a connect sidecar's first restarts are immediate,
// later ones wait the policy's delay, doubled each time (capped at the
// interval); attempts and interval still apply.
func TestSidecarTracker(t *testing.T) {
	fail := &driver.ExitResult{ExitCode: 1}
	t0 := time.Unix(1000, 0)
	tr := NewSidecarTracker(RestartPolicy{Attempts: 6, Interval: time.Minute, Delay: 15 * time.Second, Mode: "fail"}, nil)
	for i, want := range []time.Duration{0, 0, 15 * time.Second, 30 * time.Second, time.Minute, time.Minute} {
		if d := tr.Next(t0, fail); !d.Restart || d.Delay != want {
			t.Fatalf("restart %d: %+v, want a restart after %v", i+1, d, want)
		}
	}
	if d := tr.Next(t0, fail); d.Restart || !d.Failed {
		t.Fatalf("attempts not enforced: %+v", d)
	}
	// A crash after the interval starts a new count: immediate again.
	if d := tr.Next(t0.Add(2*time.Minute), fail); !d.Restart || d.Delay != 0 {
		t.Fatalf("after the interval: %+v", d)
	}
}
