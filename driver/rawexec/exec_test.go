package rawexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

func startSleeper(t *testing.T, d *Driver) *driver.TaskConfig {
	t.Helper()
	cfg := dt.TaskConfig(t, "sleeper", "sleep", "60")
	cfg.Env["FOO"] = "from-task"
	dt.Start(t, d, cfg)
	return cfg
}

func TestExecTask(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	tests := []struct {
		name       string
		cmd        []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"env and cwd", []string{"sh", "-c", `echo "$FOO"; pwd; echo err >&2; exit 4`}, 4, "from-task\n" + cfg.TaskDir + "\n", "err\n"},
		{"success", []string{"true"}, 0, "", ""},
		{"killed", []string{"sh", "-c", "kill -KILL $$"}, 137, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.ExecTask(cfg.ID, tc.cmd, dt.Timeout)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.wantCode || string(res.Stdout) != tc.wantStdout || string(res.Stderr) != tc.wantStderr {
				t.Fatalf("got code %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
	if _, err := d.ExecTask(cfg.ID, []string{"no-such-binary-meshlet"}, time.Second); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing command: %v", err)
	}
	if _, err := d.ExecTask(cfg.ID, nil, time.Second); err == nil {
		t.Fatal("empty command accepted")
	}
}

func TestExecTaskTimeout(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	res, err := d.ExecTask(cfg.ID, []string{"sh", "-c", "echo started; exec sleep 60"}, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecTask: %v, want DeadlineExceeded", err)
	}
	if res == nil || string(res.Stdout) != "started\n" || res.ExitCode != 137 {
		t.Fatalf("result %+v", res)
	}
}

func TestExecTaskStreaming(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	var out, errOut bytes.Buffer
	code, err := d.ExecTaskStreaming(context.Background(), cfg.ID, &driver.ExecOptions{
		Command: []string{"sh", "-c", "cat; echo done >&2"},
		Stdin:   strings.NewReader("line one\nline two\n"),
		Stdout:  &out,
		Stderr:  &errOut,
	})
	if err != nil || code != 0 || out.String() != "line one\nline two\n" || errOut.String() != "done\n" {
		t.Fatalf("code %d err %v stdout %q stderr %q", code, err, out.String(), errOut.String())
	}
}

// TestExecTaskTTY: with TTY the command runs on a terminal sized and
// resized as asked (alloc exec's default from a terminal).
func TestExecTaskTTY(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	dt.CheckTTYExec(t, d, cfg.ID)
}

// TestExecTaskStreamingCancel: cancelling ctx kills a command that would
// otherwise wait for stdin forever.
func TestExecTaskStreamingCancel(t *testing.T) {
	d := newDriver(t, "")
	cfg := startSleeper(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := newBlockingStdin()
	defer pw.Close()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := d.ExecTaskStreaming(ctx, cfg.ID, &driver.ExecOptions{
			Command: []string{"sh", "-c", "echo waiting; cat"},
			Stdin:   pr,
			Stdout:  &out,
		})
		done <- err
	}()
	testutil.WaitFor(t, dt.Timeout, "the command to wait for stdin", func() bool { return strings.Contains(out.String(), "waiting") })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ExecTaskStreaming: %v, want context.Canceled", err)
		}
	case <-time.After(dt.Timeout):
		t.Fatal("cancel did not end the exec session")
	}
}

// newBlockingStdin returns a reader that blocks until the writer closes.
func newBlockingStdin() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }
