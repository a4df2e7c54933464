// Package drivertest holds helpers for the task drivers' tests: building
// task configs in throwaway directories, waiting for exits and reading the
// task's rotated logs. It is imported by tests only.
package drivertest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/internal/launch"
	"github.com/meshlet/meshlet/driver/logging"
	"github.com/meshlet/meshlet/internal/testutil"
)

// Timeout is the hang guard for waits in driver tests.
const Timeout = 30 * time.Second

// DispatchExecutor makes a test binary double as the executor: call it
// first in TestMain. The drivers re-exec os.Executable() with "executor".
func DispatchExecutor() {
	if len(os.Args) > 1 && os.Args[1] == "executor" {
		os.Exit(executor.Main(os.Args[2:]))
	}
}

var seq atomic.Int64

// TaskConfig returns a config for a task named name running argv, with its
// own task and alloc directories; logs go to "<alloc>/logs/<name>.std*".
func TaskConfig(t testing.TB, name string, argv ...string) *driver.TaskConfig {
	t.Helper()
	root := t.TempDir()
	cfg := &driver.TaskConfig{
		ID:       fmt.Sprintf("alloc-%d/%s/%d", os.Getpid(), name, seq.Add(1)),
		AllocID:  fmt.Sprintf("alloc-%d", os.Getpid()),
		Name:     name,
		JobName:  "test",
		Config:   map[string]any{"command": argv[0]},
		Env:      map[string]string{"PATH": launch.DefaultPath},
		TaskDir:  filepath.Join(root, name),
		AllocDir: filepath.Join(root, "alloc"),
	}
	cfg.StdoutPath = filepath.Join(cfg.AllocDir, "logs", name+".stdout")
	cfg.StderrPath = filepath.Join(cfg.AllocDir, "logs", name+".stderr")
	if len(argv) > 1 {
		args := make([]any, 0, len(argv)-1)
		for _, a := range argv[1:] {
			args = append(args, a)
		}
		cfg.Config["args"] = args
	}
	for _, dir := range []string{cfg.TaskDir, cfg.AllocDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// Start starts cfg on d and destroys the task (forcefully) at cleanup.
func Start(t testing.TB, d driver.Driver, cfg *driver.TaskConfig) *driver.TaskHandle {
	t.Helper()
	h, err := d.StartTask(cfg)
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	t.Cleanup(func() { _ = d.DestroyTask(cfg.ID, true) })
	return h
}

// Wait waits for the task's exit.
func Wait(t testing.TB, d driver.Driver, id string) *driver.ExitResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ch, err := d.WaitTask(ctx, id)
	if err != nil {
		t.Fatalf("WaitTask: %v", err)
	}
	res := <-ch
	if res == nil {
		t.Fatalf("task %s did not exit within %s", id, Timeout)
	}
	return res
}

// Log returns everything the task wrote to stream, across rotated files.
func Log(t testing.TB, cfg *driver.TaskConfig, stream string) string {
	t.Helper()
	r, err := logging.NewReader(filepath.Join(cfg.AllocDir, "logs"), cfg.Name, stream, logging.OriginStart, 0, false)
	if err != nil {
		t.Fatalf("open %s log: %v", stream, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s log: %v", stream, err)
	}
	return string(b)
}

// WaitLog waits until the task's stdout contains want.
func WaitLog(t testing.TB, cfg *driver.TaskConfig, want string) {
	t.Helper()
	testutil.WaitFor(t, Timeout, fmt.Sprintf("%q in the task's stdout", want), func() bool {
		r, err := logging.NewReader(filepath.Join(cfg.AllocDir, "logs"), cfg.Name, "stdout", logging.OriginStart, 0, false)
		if err != nil {
			return false
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		return strings.Contains(string(b), want)
	})
}

// ExecBackground starts a background sleep from an exec session in task
// id and returns its PID (killed at the test's end).
func ExecBackground(t testing.TB, d driver.Driver, id string) int {
	t.Helper()
	res, err := d.ExecTask(id, []string{"sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $!"}, Timeout)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("exec stdout %q", res.Stdout)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// CheckTTYExec runs a shell on a terminal in task id: its stdio must be
// a terminal of the size queued before it started, then of the size sent
// while it runs, and its input and exit code must come through.
func CheckTTYExec(t testing.TB, d driver.StreamingExecer, id string) {
	t.Helper()
	resize := make(chan driver.TerminalSize, 1)
	resize <- driver.TerminalSize{Height: 33, Width: 111}
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out testutil.SyncBuffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := d.ExecTaskStreaming(context.Background(), id, &driver.ExecOptions{
			Command: []string{"sh", "-c", `test -t 0 && test -t 1 && test -t 2 && echo on-a-tty; stty size; while read l; do [ "$l" = q ] && exit 3; stty size; done`},
			Stdin:   stdinR, Stdout: &out, TTY: true, Resize: resize,
		})
		done <- result{code, err}
	}()
	ended := func() {
		select {
		case r := <-done:
			t.Fatalf("tty exec ended early: code %d, err %v, output %q", r.code, r.err, out.String())
		default:
		}
	}
	testutil.WaitFor(t, Timeout, "a tty of the queued size", func() bool {
		ended()
		return strings.Contains(out.String(), "on-a-tty\r\n33 111\r\n")
	})
	resize <- driver.TerminalSize{Height: 40, Width: 120}
	testutil.WaitFor(t, Timeout, "the terminal resized", func() bool {
		ended()
		_, _ = stdinW.Write([]byte("\n"))
		return strings.Contains(out.String(), "40 120")
	})
	_, _ = stdinW.Write([]byte("q\n"))
	select {
	case r := <-done:
		if r.err != nil || r.code != 3 {
			t.Fatalf("tty exec: code %d, err %v, output %q", r.code, r.err, out.String())
		}
	case <-time.After(Timeout):
		t.Fatalf("tty exec did not end; output %q", out.String())
	}
}
