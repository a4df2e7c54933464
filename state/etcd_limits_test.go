package state

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// planOf returns a plan placing n allocations of a new job, with one
// evaluation.
func planOf(job string, n int, name string) *Plan {
	p := &Plan{Job: testJob(job, 0), Evals: []*Evaluation{{ID: job + "-eval", JobID: job}}}
	for i := 0; i < n; i++ {
		p.Allocs = append(p.Allocs, &structs.Allocation{ID: fmt.Sprintf("%s-%03d", job, i), JobID: job,
			NodeID: "n1", Name: name, Job: testJob(job, 0)})
	}
	return p
}

// TestEtcdServerLimits runs against a member with etcd's default request
// limits: a plan of 30 allocations fits, bigger ones fail with
// ErrPlanTooLarge and change nothing; once the member is gone, calls fail
// after RequestTimeout instead of hanging.
func TestEtcdServerLimits(t *testing.T) {
	e, err := startMember(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			e.Close()
		}
	}()
	c := newClient(t, e.Clients[0].Addr().String())
	s, err := tryOpenEtcd(c, EtcdOptions{Prefix: testPrefix(t), RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if _, err := s.ApplyPlan(planOf("fits", 30, "")); err != nil {
		t.Fatalf("plan of 30 allocations under the default --max-txn-ops: %v", err)
	}
	before := s.Index()
	for name, p := range map[string]*Plan{
		"too many operations":          planOf("many", 40, ""),
		"too many bytes":               planOf("big", 17, strings.Repeat("x", 100<<10)),
		"over the client's send limit": planOf("huge", 25, strings.Repeat("x", 100<<10)),
	} {
		if _, err := s.ApplyPlan(p); !errors.Is(err, ErrPlanTooLarge) || !strings.Contains(err.Error(), "--max-") {
			t.Errorf("%s: %v, want ErrPlanTooLarge naming the setting", name, err)
		}
	}
	if s.Index() != before {
		t.Fatalf("index moved from %d to %d", before, s.Index())
	}
	if got, err := s.Allocs(); err != nil || len(got) != 30 {
		t.Fatalf("allocs after refused plans: %d, %v", len(got), err)
	}

	e.Server.HardStop()
	start := time.Now()
	if _, err := s.UpsertJob(testJob("a", 0)); err == nil {
		t.Fatal("write to a stopped member succeeded")
	}
	if _, err := s.Jobs(); err == nil {
		t.Fatal("read from a stopped member succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("calls to a stopped member took %v", d)
	}
	_ = s.Close()
	_ = c.Close()
	e.Close()
	stopped = true
}
