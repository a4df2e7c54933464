package server

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// EnforceIndex (`job run -check-index`) is checked against the stored job
// in the registration's own plan: index 0 registers only a new job, any
// other index only the job at that JobModifyIndex; a failed check stores
// nothing. PreserveCounts keeps the stored groups' counts.
func TestRegisterEnforceIndexAndPreserveCounts(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	first, err := s.RegisterJobWith(ctx, testJob("web", "raw_exec", 2), RegisterOptions{EnforceIndex: true})
	if err != nil {
		t.Fatalf("check-index 0 on a new job: %v", err)
	}
	refused := []struct {
		name string
		opts RegisterOptions
		want string
	}{
		{"index 0 on an existing job", RegisterOptions{EnforceIndex: true}, EnforceIndexErrPrefix + " 0: job already exists"},
		{"a stale index", RegisterOptions{EnforceIndex: true, JobModifyIndex: first.JobModifyIndex + 100},
			"job exists with conflicting job modify index"},
	}
	for _, tc := range refused {
		if _, err := s.RegisterJobWith(ctx, testJob("web", "raw_exec", 5), tc.opts); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
		if job, _ := s.Job(ctx, "web"); job.TaskGroups[0].Count != 2 || job.JobModifyIndex != first.JobModifyIndex {
			t.Fatalf("%s changed the job: count %d, job modify index %d", tc.name, job.TaskGroups[0].Count, job.JobModifyIndex)
		}
	}
	if _, err := s.RegisterJobWith(ctx, testJob("api", "raw_exec", 1), RegisterOptions{EnforceIndex: true, JobModifyIndex: 7}); err == nil ||
		!strings.Contains(err.Error(), "job does not exist") {
		t.Fatalf("check-index 7 on a new job: %v, want job does not exist", err)
	}

	// The current index registers; PreserveCounts keeps count 2.
	next, err := s.RegisterJobWith(ctx, testJob("web", "raw_exec", 5), RegisterOptions{EnforceIndex: true,
		JobModifyIndex: first.JobModifyIndex, PreserveCounts: true})
	if err != nil {
		t.Fatalf("check-index at the current index: %v", err)
	}
	job, err := s.Job(ctx, "web")
	if err != nil || job.TaskGroups[0].Count != 2 || next.JobModifyIndex != first.JobModifyIndex {
		t.Fatalf("preserved counts: count %d (%v), job modify index %d → %d; want count 2 and no new version",
			job.TaskGroups[0].Count, err, first.JobModifyIndex, next.JobModifyIndex)
	}
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 5)); err != nil {
		t.Fatal(err)
	}
	if job, _ := s.Job(ctx, "web"); job.TaskGroups[0].Count != 5 {
		t.Fatalf("count without PreserveCounts = %d, want 5", job.TaskGroups[0].Count)
	}
}
