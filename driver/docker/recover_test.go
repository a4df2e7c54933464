package docker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
)

// An agent restart: the first driver stops following (Close), the
// container keeps running and writing, a new driver recovers it from the
// handle; the logs hold every line exactly once and the wait reports the
// exit.
func TestRecoverAfterAgentRestart(t *testing.T) {
	stateDir := t.TempDir()
	d1 := newDriver(t, docker.Config{StateDir: stateDir})
	cfg := taskConfig(t, "counter", "sh", "-c", `i=1; while [ $i -le 25 ]; do echo line$i; echo err$i >&2; i=$((i+1)); sleep 0.1; done; exit 5`)
	h, err := d1.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d1.DestroyTask(cfg.ID, true) })
	drivertest.WaitLog(t, cfg, "line3\n")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d1.InspectTask(cfg.ID); err == nil {
		t.Error("a closed driver still knows the task")
	}
	time.Sleep(700 * time.Millisecond) // output while no agent follows it

	d2 := newDriver(t, docker.Config{StateDir: stateDir})
	if err := d2.RecoverTask(h); err != nil {
		t.Fatal(err)
	}
	if err := d2.RecoverTask(h); err != nil {
		t.Errorf("recovering a known task: %v", err)
	}
	t.Cleanup(func() { d2.DestroyTask(cfg.ID, true) })
	if res := drivertest.Wait(t, d2, cfg.ID); res.ExitCode != 5 {
		t.Errorf("exit = %+v, want 5", res)
	}
	var want, wantErr strings.Builder
	for i := 1; i <= 25; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	if got := drivertest.Log(t, cfg, "stdout"); got != want.String() {
		t.Errorf("stdout = %q, want every line once", got)
	}
	if got := drivertest.Log(t, cfg, "stderr"); got != wantErr.String() {
		t.Errorf("stderr = %q, want every line once", got)
	}
}

func TestRecoverBadHandle(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "gone", "true")
	state, _ := json.Marshal(map[string]any{"version": 1, "container_id": "0123456789abcdef"})
	err := d.RecoverTask(&driver.TaskHandle{Version: 1, Config: cfg, DriverState: state})
	if err == nil || !strings.Contains(err.Error(), "0123456789ab") {
		t.Errorf("recovering a missing container: %v, want an error naming it", err)
	}
	err = d.RecoverTask(&driver.TaskHandle{Version: 9, Config: cfg, DriverState: state})
	if err == nil {
		t.Error("recovering a handle of an unknown version succeeded")
	}
}

// A container whose allocation is gone is removed by Sweep; one whose
// allocation lives is kept.
func TestSweep(t *testing.T) {
	d := newDriver(t, docker.Config{GCContainer: new(bool)}) // keep containers on destroy
	keep := taskConfig(t, "keep", "true")
	keep.AllocID = "alloc-live"
	drop := taskConfig(t, "drop", "true")
	drop.AllocID = "alloc-gone"
	for _, cfg := range []*driver.TaskConfig{keep, drop} {
		drivertest.Start(t, d, cfg)
		drivertest.Wait(t, d, cfg.ID)
		if err := d.DestroyTask(cfg.ID, false); err != nil {
			t.Fatal(err)
		}
	}
	c := daemon.Client(t)
	ctx := context.Background()
	removed, err := d.Sweep(ctx, func(alloc string) bool { return alloc != "alloc-gone" })
	if err != nil || removed < 1 {
		t.Fatalf("Sweep = %d, %v", removed, err)
	}
	list, err := c.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var allocs []string
	for _, ct := range list {
		allocs = append(allocs, ct.Labels[docker.LabelAllocID])
	}
	got := strings.Join(allocs, ",")
	if strings.Contains(got, "alloc-gone") || !strings.Contains(got, "alloc-live") {
		t.Errorf("containers' allocations after sweep: %s", got)
	}
	// Another agent on the same daemon (its own state dir, so its own
	// owner label) knows none of these allocations and removes nothing.
	other := newDriver(t, docker.Config{})
	if n, err := other.Sweep(ctx, func(string) bool { return false }); n != 0 || err != nil {
		t.Errorf("another agent's Sweep = %d, %v; want 0 (the containers are not its own)", n, err)
	}
	if _, err := d.Sweep(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	// Without a daemon there is nothing to sweep.
	gone := docker.New(docker.Config{Endpoint: "unix://" + t.TempDir() + "/no.sock"}, hclog.NewNullLogger())
	defer gone.Close()
	if n, err := gone.Sweep(ctx, func(string) bool { return false }); n != 0 || err != nil {
		t.Errorf("Sweep without a daemon = %d, %v", n, err)
	}
}

// containerByTask lists the container of one task.
func containerByTask(taskID string) container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelTaskID+"="+taskID))}
}

// With the daemon unreachable (restarting, say), RecoverTask keeps the
// task rather than failing it, which would start a second container.
func TestRecoverWithDaemonDown(t *testing.T) {
	d := docker.New(docker.Config{Endpoint: "unix://" + t.TempDir() + "/down.sock", StateDir: t.TempDir()}, hclog.NewNullLogger())
	defer d.Close()
	cfg := &driver.TaskConfig{ID: "a/t/1", AllocID: "a", Name: "t", StdoutPath: t.TempDir() + "/t.stdout", StderrPath: t.TempDir() + "/t.stderr"}
	state, _ := json.Marshal(map[string]any{"version": 1, "container_id": "0123456789abcdef"})
	if err := d.RecoverTask(&driver.TaskHandle{Version: 1, Config: cfg, DriverState: state}); err != nil {
		t.Fatalf("RecoverTask with the daemon down: %v", err)
	}
	if st, err := d.InspectTask(cfg.ID); err != nil || st.State != driver.TaskStateRunning {
		t.Errorf("InspectTask = %+v, %v; want the task kept as running", st, err)
	}
}
