package docker_test

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/meshlet/meshlet/driver/docker"
)

// The agent was killed after a task's container started but before its
// handle was saved: the restarted agent starts the task again, and the
// driver removes the container nobody tracks before creating the new one
// (left, it would keep running beside it, holding the task's ports).
func TestStartRemovesUntrackedContainerOfTask(t *testing.T) {
	stateDir := t.TempDir()
	d1 := newDriver(t, docker.Config{StateDir: stateDir})
	cfg := taskConfig(t, "web", "sleep", "300")
	if _, err := d1.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d1.DestroyTask(cfg.ID, true) })
	// The handle is lost with the agent; the container runs on.
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	running := func() []string {
		list, err := daemon.Client(t).ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelAllocID+"="+cfg.AllocID), filters.Arg("label", docker.LabelTask+"=web"))})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		return ids
	}
	before := running()
	if len(before) != 1 {
		t.Fatalf("running containers of the task before the restart: %v, want one", before)
	}

	d2 := newDriver(t, docker.Config{StateDir: stateDir})
	again := *cfg
	again.ID = cfg.ID + "-2" // the task runner's new task ID
	if _, err := d2.StartTask(&again); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.DestroyTask(again.ID, true) })
	after := running()
	if len(after) != 1 || after[0] == before[0] {
		t.Fatalf("running containers of the task after the second start: %v (the first was %s); want only a new one", after, before[0][:12])
	}

	// A tracked container of the task is never touched: starting another
	// instance beside it (as a restart with the old one still known
	// would) keeps it.
	third := *cfg
	third.ID = cfg.ID + "-3"
	if _, err := d2.StartTask(&third); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.DestroyTask(third.ID, true) })
	if got := running(); len(got) != 2 {
		t.Errorf("running containers with two tracked instances: %v, want both", got)
	}
}
