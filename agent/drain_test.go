package agent

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// TestForcedDrainStopsTasksAndCompletes: a forced drain of the agent's
// only node stops its allocation (nowhere to migrate it), the client
// kills the task, and the drain completes with the node ineligible.
func TestForcedDrainStopsTasksAndCompletes(t *testing.T) {
	a := startAgent(t, t.TempDir())
	cleanupJob(t, &a, "web")
	b := a.Backend()
	ctx := context.Background()
	if _, err := b.RegisterJob(ctx, parseJob(t, shJob("web", loopScript, "")), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, b, "web", structs.AllocClientStatusRunning)
	pid := taskPID(t, a, alloc)
	if _, err := b.UpdateNodeDrain(ctx, alloc.NodeID[:8], &structs.DrainSpec{Deadline: -1}, false); err != nil {
		t.Fatal(err)
	}
	stopped := waitAllocStatus(t, b, "web", structs.AllocClientStatusComplete)
	if stopped.DesiredDescription != "alloc is being migrated" {
		t.Errorf("stopped allocation's description %q", stopped.DesiredDescription)
	}
	testutil.WaitFor(t, hang, "task process gone", func() bool { return !alive(pid) })
	testutil.WaitFor(t, hang, "drain complete", func() bool {
		n, err := b.GetNode(ctx, alloc.NodeID)
		return err == nil && !n.Draining() && !n.Eligible()
	})
	res, err := b.UpdateNodeEligibility(ctx, alloc.NodeID, true)
	if err != nil || res.NodeModifyIndex == 0 {
		t.Fatalf("eligibility after the drain: %+v %v", res, err)
	}
	// Eligible again: the job is placed back.
	if again := waitAllocStatus(t, b, "web", structs.AllocClientStatusRunning); again.ID == alloc.ID {
		t.Fatal("the drained allocation runs again")
	}
}
