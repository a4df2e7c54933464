package rawexec

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// waitGone waits for pid to be gone, and kills it if it is not.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.Running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s: the background child %d still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A task's background children end with it, as Nomad's executor kills the
// task's process group: whether the task exits by itself or is stopped
// with a signal that a child ignores.
func TestBackgroundChildrenEndWithTask(t *testing.T) {
	d := newDriver(t, "")
	dir := t.TempDir()

	exited := filepath.Join(dir, "exited")
	cfg := dt.TaskConfig(t, "exits", "/bin/sh", "-c", `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > `+exited+`; exit 3`)
	dt.Start(t, d, cfg)
	pid := testutil.WaitPIDFile(t, dt.Timeout, exited)
	if res := dt.Wait(t, d, cfg.ID); res.ExitCode != 3 {
		t.Fatalf("exit code = %d, want 3", res.ExitCode)
	}
	waitGone(t, pid, "after the task exited")

	stopped := filepath.Join(dir, "stopped")
	cfg = dt.TaskConfig(t, "stopped", "/bin/sh", "-c",
		`/bin/sh -c 'trap "" TERM; while :; do sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo $! > `+stopped+`; while :; do sleep 0.1; done`)
	dt.Start(t, d, cfg)
	pid = testutil.WaitPIDFile(t, dt.Timeout, stopped)
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task was stopped with SIGTERM")
}

// What an exec session leaves running in the background, and a session
// still running, end with the task, whether it is stopped or exits by
// itself (Nomad's end with the task's cgroup).
func TestExecChildrenEndWithTask(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	pid := dt.ExecBackground(t, d, cfg.ID)
	var out testutil.SyncBuffer
	running := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		code, _ := d.ExecTaskStreaming(ctx, cfg.ID, &driver.ExecOptions{
			Command: []string{"sh", "-c", "echo started; exec sleep 300"}, Stdout: &out,
		})
		running <- code
	}()
	testutil.WaitFor(t, dt.Timeout, "the session to run", func() bool { return out.String() == "started\n" })
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task was stopped")
	select {
	case code := <-running:
		if code != 137 {
			t.Errorf("running session: exit code %d, want 137", code)
		}
	case <-time.After(dt.Timeout):
		t.Fatal("a running session outlived its stopped task")
	}

	release := filepath.Join(t.TempDir(), "release")
	cfg = dt.TaskConfig(t, "exits", "/bin/sh", "-c", "while [ ! -e "+release+" ]; do sleep 0.05; done")
	dt.Start(t, d, cfg)
	pid = dt.ExecBackground(t, d, cfg.ID)
	touch(t, release)
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task exited")
}

// A background job started from an `alloc exec -t` shell with job control
// (its own process group, in the terminal's session) ends with the task.
func TestExecTTYJobsEndWithTask(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	var out testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_, _ = d.ExecTaskStreaming(ctx, cfg.ID, &driver.ExecOptions{
			Command: []string{"sh", "-c", "set -m; sleep 300 </dev/null >/dev/null 2>&1 & echo bg=$!; sleep 0.3"},
			Stdout:  &out, TTY: true,
		})
	}()
	var pid int
	testutil.WaitFor(t, dt.Timeout, "the background job's pid", func() bool {
		_, rest, ok := strings.Cut(out.String(), "bg=")
		if ok {
			pid, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
		}
		return pid > 0
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if pg, _ := syscall.Getpgid(pid); pg != pid {
		t.Fatalf("the background job %d is in group %d, want its own (job control)", pid, pg)
	}
	time.Sleep(500 * time.Millisecond) // the session's command ends first
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	waitGone(t, pid, "after the task was stopped, the tty session's background job")
}
