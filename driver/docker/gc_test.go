package docker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// imagePresent reports whether the daemon has ref.
func imagePresent(t *testing.T, ref string) bool {
	t.Helper()
	_, err := daemon.Client(t).ImageInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// removePauseImage makes the next bridge task import the pause image
// again (so the driver under test owns it).
func removePauseImage(t *testing.T) {
	t.Helper()
	_, err := daemon.Client(t).ImageRemove(context.Background(), docker.PauseImage(), image.RemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("remove the pause image (a container of an earlier test still uses it?): %v", err)
	}
}

// bridgeSleeper is a task joining the namespace at path.
func bridgeSleeper(t *testing.T, name, alloc, path string) *driver.TaskConfig {
	cfg := taskConfig(t, name, "sleep", "300")
	delete(cfg.Config, "network_mode")
	cfg.AllocID, cfg.NetNSPath = alloc, path
	return cfg
}

// Image GC removes the images the driver imported (the pause image) once
// no container uses them, after the delay; never while one allocation
// still uses it, and never the images it did not pull (the test image).
func TestImageGC(t *testing.T) {
	daemon.Require(t)
	removePauseImage(t)
	d := newDriver(t, docker.Config{GCImageDelay: 300 * time.Millisecond})
	_, path1 := newNetNS(t, "mlt0")
	_, path2 := newNetNS(t, "mlt1")
	one, two := bridgeSleeper(t, "one", "alloc-gc-1", path1), bridgeSleeper(t, "two", "alloc-gc-2", path2)
	drivertest.Start(t, d, one)
	drivertest.Start(t, d, two)
	if !imagePresent(t, docker.PauseImage()) {
		t.Fatal("pause image not imported")
	}
	if err := d.DestroyTask(one.ID, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // > the delay: the second allocation still holds it
	if !imagePresent(t, docker.PauseImage()) {
		t.Fatal("pause image removed while an allocation's pause container uses it")
	}
	if err := d.DestroyTask(two.ID, true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the unused pause image removed", func() bool {
		return !imagePresent(t, docker.PauseImage())
	})
	if !imagePresent(t, dockertest.Image) {
		t.Error("image GC removed the test image, which the driver did not pull")
	}
}

// Reused before the delay ends, an image stays; the set of owned images
// survives a driver restart, whose sweep collects what nothing uses.
func TestImageGCReuseAndRestart(t *testing.T) {
	daemon.Require(t)
	removePauseImage(t)
	state := t.TempDir()
	d := newDriver(t, docker.Config{StateDir: state, GCImageDelay: time.Second})
	_, path := newNetNS(t, "mlt0")
	first := bridgeSleeper(t, "first", "alloc-gc-3", path)
	drivertest.Start(t, d, first)
	if err := d.DestroyTask(first.ID, true); err != nil {
		t.Fatal(err)
	}
	second := bridgeSleeper(t, "second", "alloc-gc-3", path)
	drivertest.Start(t, d, second) // within the delay
	time.Sleep(1500 * time.Millisecond)
	if !imagePresent(t, docker.PauseImage()) {
		t.Fatal("pause image removed although used again within the delay")
	}
	if err := d.DestroyTask(second.ID, true); err != nil {
		t.Fatal(err)
	}
	d.Close() // before the delay ends: the removal is cancelled
	time.Sleep(1500 * time.Millisecond)
	if !imagePresent(t, docker.PauseImage()) {
		t.Fatal("pause image removed by a closed driver")
	}
	again := newDriver(t, docker.Config{StateDir: state, GCImageDelay: 300 * time.Millisecond})
	if _, err := again.Sweep(context.Background(), func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the pause image removed after the restart", func() bool {
		return !imagePresent(t, docker.PauseImage())
	})
}

// The periodic sweep removes this driver's running containers no tracked
// task owns, once past the creation grace; it keeps tracked tasks, other
// drivers' containers, and with dry_run everything.
func TestDanglingContainerSweep(t *testing.T) {
	daemon.Require(t)
	c := daemon.Client(t)
	ctx := context.Background()
	state := t.TempDir()
	run := func(owner string) string {
		t.Helper()
		created, err := c.ContainerCreate(ctx, &container.Config{Image: dockertest.Image, Cmd: []string{"sleep", "300"},
			Labels: map[string]string{docker.LabelAllocID: "alloc-dangling", docker.LabelOwner: owner}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}) })
		if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		return created.ID
	}
	exists := func(id string) bool {
		_, err := c.ContainerInspect(ctx, id)
		return err == nil
	}
	mine, others := run(state), run("/some/other/agent")
	dry := newDriver(t, docker.Config{StateDir: state, Dangling: docker.DanglingConfig{Period: 100 * time.Millisecond,
		CreationGrace: 200 * time.Millisecond, DryRun: true}})
	tracked := taskConfig(t, "tracked", "sleep", "300")
	drivertest.Start(t, dry, tracked)
	time.Sleep(time.Second)
	if !exists(mine) {
		t.Fatal("dry run removed a dangling container")
	}
	dry.Close()
	d := newDriver(t, docker.Config{StateDir: state, Dangling: docker.DanglingConfig{Period: 100 * time.Millisecond,
		CreationGrace: 200 * time.Millisecond}})
	live := taskConfig(t, "live", "sleep", "300")
	drivertest.Start(t, d, live)
	testutil.WaitFor(t, 10*time.Second, "the dangling container removed", func() bool { return !exists(mine) })
	time.Sleep(500 * time.Millisecond)
	if !exists(others) {
		t.Error("the sweep removed another agent's container")
	}
	if st, err := d.InspectTask(live.ID); err != nil || st.State != driver.TaskStateRunning {
		t.Errorf("tracked task = %+v, %v; want running", st, err)
	}
	// The closed dry-run driver's task is now untracked: swept as well.
	testutil.WaitFor(t, 10*time.Second, "the untracked task container removed", func() bool {
		list, _ := c.ContainerList(ctx, containerByTask(tracked.ID))
		return len(list) == 0
	})
}

// Two agents whose state directories have the same path (agents in
// containers mounting one docker.sock, or on hosts sharing one TCP
// endpoint) still have different owner labels: one's sweeps never remove
// the other's running containers.
func TestOwnerLabelUniquePerAgent(t *testing.T) {
	daemon.Require(t)
	state := t.TempDir()
	a := newDriver(t, docker.Config{StateDir: state})
	task := taskConfig(t, "a-task", "sleep", "300")
	drivertest.Start(t, a, task)
	// The other agent's own filesystem: the same path without a's ID.
	if err := os.Remove(filepath.Join(state, "owner-id")); err != nil {
		t.Fatalf("the owner ID is not kept in the state directory: %v", err)
	}
	b := newDriver(t, docker.Config{StateDir: state, Dangling: docker.DanglingConfig{Period: 100 * time.Millisecond,
		CreationGrace: time.Millisecond}})
	if n, err := b.Sweep(context.Background(), func(string) bool { return false }); n != 0 || err != nil {
		t.Errorf("the other agent's Sweep = %d, %v; want 0", n, err)
	}
	time.Sleep(time.Second) // several dangling rounds of b
	if st, err := a.InspectTask(task.ID); err != nil || st.State != driver.TaskStateRunning {
		t.Fatalf("a's task = %+v, %v after b's sweeps; want running", st, err)
	}
}

// A corrupt record of the images the driver pulled is kept aside, not
// overwritten by the next record: its images are never collected (the
// driver cannot tell they are its own), and the operator can still read
// what it listed.
func TestOwnedImagesCorruptKeptAside(t *testing.T) {
	daemon.Require(t)
	removePauseImage(t)
	state := t.TempDir()
	file := filepath.Join(state, "owned-images.json")
	if err := os.WriteFile(file, []byte(`["half-writ`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, docker.Config{StateDir: state})
	_, path := newNetNS(t, "mlt0")
	task := bridgeSleeper(t, "aside", "alloc-gc-aside", path)
	drivertest.Start(t, d, task) // imports the pause image: recorded
	t.Cleanup(func() { d.DestroyTask(task.ID, true) })
	if got, err := os.ReadFile(file + ".corrupt"); err != nil || string(got) != `["half-writ` {
		t.Errorf("corrupt record kept aside = %q, %v; want the original bytes", got, err)
	}
	var list []string
	if got, err := os.ReadFile(file); err != nil || json.Unmarshal(got, &list) != nil || len(list) != 1 {
		t.Errorf("new record = %q, %v; want the pause image alone", got, err)
	}
}
