package client

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// A job stop, then an agent restart during the group's shutdown_delay:
// the next agent re-attaches to the task and still stops it (it did not:
// the stop was recorded, the task ran on for good).
func TestStopSurvivesAgentRestart(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	dir := t.TempDir()
	c := newClient(t, srv, dir, drv)
	j := job("s", "")
	d := 2 * time.Second
	j.TaskGroups[0].ShutdownDelay = &d
	if _, err := srv.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	a := waitStatus(t, srv, "s", structs.AllocClientStatusRunning)
	if _, err := srv.StopJob(ctx, "s", false); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hang, "stop persisted", func() bool {
		l, _ := c.db.Allocs()
		return len(l) == 1 && l[0].DesiredStatus == structs.AllocDesiredStatusStop
	})
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	c = newClient(t, srv, dir, drv)
	defer c.Shutdown()
	testutil.WaitFor(t, 20*time.Second, "the stopped allocation's task killed after the restart", func() bool {
		return len(drv.Running()) == 0
	})
	testutil.WaitFor(t, hang, "the allocation reported complete", func() bool {
		got := allocOf(t, srv, "s")
		return got.ID == a.ID && got.TerminalStatus()
	})
}
