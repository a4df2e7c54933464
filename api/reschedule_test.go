package api_test

import (
	"context"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

// The official client sees a rescheduled allocation's links and history
// in Nomad's shape: FollowupEvalID, NextAllocation and RescheduleTracker
// in the list stub; PreviousAllocation in the allocation itself.
func TestOfficialClientSeesRescheduling(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	_, err := fb.RegisterJob(context.Background(), &structs.Job{ID: "web", Name: "web", TaskGroups: []*structs.TaskGroup{{
		Name: "g", Count: 1, Tasks: []*structs.Task{{Name: "t", Driver: "raw_exec"}},
	}}}, api.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocs := fb.Allocations()
	if len(allocs) != 1 {
		t.Fatalf("%d allocations placed, want 1", len(allocs))
	}
	id := allocs[0].ID
	tracker := &structs.RescheduleTracker{Events: []*structs.RescheduleEvent{{
		RescheduleTime: time.Now().UnixNano(), PrevAllocID: "prev-alloc", PrevNodeID: "n1", Delay: 30 * time.Second,
	}}}
	fb.UpdateAlloc(id, func(a *structs.Allocation) {
		a.ClientStatus = structs.AllocClientStatusFailed
		a.FollowupEvalID, a.NextAllocation, a.PreviousAllocation = "followup-eval", "next-alloc", "prev-alloc"
		a.RescheduleTracker = tracker
	})

	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := c.Jobs().Allocations("web", true, nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("job allocations = %v, %v", list, err)
	}
	stub := list[0]
	if stub.FollowupEvalID != "followup-eval" || stub.NextAllocation != "next-alloc" {
		t.Errorf("stub links = %q / %q", stub.FollowupEvalID, stub.NextAllocation)
	}
	if stub.RescheduleTracker == nil || len(stub.RescheduleTracker.Events) != 1 ||
		stub.RescheduleTracker.Events[0].PrevAllocID != "prev-alloc" {
		t.Errorf("stub RescheduleTracker = %+v", stub.RescheduleTracker)
	}
	full, _, err := c.Allocations().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if full.PreviousAllocation != "prev-alloc" || full.NextAllocation != "next-alloc" || full.FollowupEvalID != "followup-eval" {
		t.Errorf("allocation links = %q %q %q", full.PreviousAllocation, full.NextAllocation, full.FollowupEvalID)
	}
}
