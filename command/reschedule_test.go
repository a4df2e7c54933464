package command

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

// A failed allocation waiting for its replacement, and one already
// replaced, show Nomad's reschedule lines in `alloc status` and the
// pending one in `job status`'s "Future Rescheduling Attempts".
func TestRescheduleStatus(t *testing.T) {
	fb := newAgent(t)
	job := connectJob()
	job.TaskGroups[0].Count = 2
	three, interval := 3, time.Hour
	job.TaskGroups[0].ReschedulePolicy = &structs.ReschedulePolicy{Attempts: &three, Interval: &interval}
	if _, err := fb.RegisterJob(context.Background(), job, api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	allocs := fb.Allocations()
	waiting, replaced := allocs[0].ID, allocs[1].ID
	fb.AddEvaluation(&api.Evaluation{ID: "f011a0e1-0000-4000-8000-000000000001", JobID: job.ID, Status: "pending",
		TriggeredBy: "alloc-failure", WaitUntil: time.Now().Add(90 * time.Second)})
	tracker := &structs.RescheduleTracker{Events: []*structs.RescheduleEvent{{RescheduleTime: time.Now().Add(-time.Minute).UnixNano(), PrevAllocID: "old"}}}
	fb.UpdateAlloc(waiting, func(a *structs.Allocation) {
		a.ClientStatus, a.FollowupEvalID, a.RescheduleTracker = structs.AllocClientStatusFailed, "f011a0e1-0000-4000-8000-000000000001", tracker
	})
	fb.UpdateAlloc(replaced, func(a *structs.Allocation) {
		a.ClientStatus, a.NextAllocation = structs.AllocClientStatusFailed, "9e0a11c0-1111-4000-8000-000000000002"
	})

	r := runCLI(t, "", "alloc", "status", waiting)
	for _, re := range []string{`(?m)^Reschedule Attempts\s+= 1/3$`, `(?m)^Reschedule Eligibility\s+= 1m(29|30)s from now$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("alloc status of the waiting allocation lacks %s:\n%s", re, r.stdout)
		}
	}
	r = runCLI(t, "", "alloc", "status", replaced)
	if !regexp.MustCompile(`(?m)^Replacement Alloc ID\s+= 9e0a11c0$`).MatchString(r.stdout) {
		t.Errorf("alloc status of the replaced allocation lacks its replacement:\n%s", r.stdout)
	}
	if regexp.MustCompile(`Reschedule Eligibility`).MatchString(r.stdout) {
		t.Errorf("a replaced allocation shows a reschedule eligibility:\n%s", r.stdout)
	}
	r = runCLI(t, "", "job", "status", job.ID)
	if !regexp.MustCompile(`(?s)Future Rescheduling Attempts\nTask Group\s+Eval ID\s+Eval Time\napi\s+f011a0e1\s+1m(29|30)s from now\n.*Allocations`).MatchString(r.stdout) {
		t.Errorf("job status lacks the future rescheduling attempt:\n%s", r.stdout)
	}
}

// `job status` reads the follow-up evaluations from the job's evaluations,
// which it lists anyway: allocations that failed together share one, and
// it used to be fetched again for each of them.
func TestFutureReschedulesReadEvaluationsOnce(t *testing.T) {
	fb := apitest.NewBackend()
	var mu sync.Mutex
	paths := map[string]int{}
	h := api.NewServer(fb, hclog.NewNullLogger()).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_ADDR", srv.URL)
	job := connectJob()
	job.TaskGroups[0].Count = 3
	if _, err := fb.RegisterJob(context.Background(), job, api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	const followup = "f011a0e1-0000-4000-8000-000000000003"
	fb.AddEvaluation(&api.Evaluation{ID: followup, JobID: job.ID, Status: "pending",
		TriggeredBy: "alloc-failure", WaitUntil: time.Now().Add(time.Minute)})
	for _, a := range fb.Allocations() {
		fb.UpdateAlloc(a.ID, func(a *structs.Allocation) {
			a.ClientStatus, a.FollowupEvalID = structs.AllocClientStatusFailed, followup
		})
	}
	r := runCLI(t, "", "job", "status", job.ID)
	if n := len(regexp.MustCompile(`(?m)^api\s+f011a0e1\s+\S+ from now$`).FindAllString(r.stdout, -1)); n != 3 {
		t.Errorf("%d future rescheduling rows, want 3:\n%s", n, r.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := paths["/v1/evaluation/"+followup]; n != 0 || paths["/v1/job/"+job.ID+"/evaluations"] != 1 {
		t.Errorf("requests %v: want the job's evaluations listed once and no single evaluation read", paths)
	}
}
