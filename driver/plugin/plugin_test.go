package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

var (
	buildOnce sync.Once
	echoPath  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// echoBinary builds testdata/echodriver once per test run.
func echoBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go toolchain in PATH to build the test plugin: %w", err)
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "meshlet-echodriver-"); buildErr != nil {
			return
		}
		echoPath = filepath.Join(buildDir, "echodriver")
		out, err := exec.Command(goBin, "build", "-o", echoPath, "./testdata/echodriver").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return echoPath
}

// pluginDir returns a directory holding the echo plugin (and a
// non-executable file Load must skip).
func pluginDir(t *testing.T) string {
	t.Helper()
	bin := echoBinary(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "echo")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir string) (driver.Driver, func()) {
	t.Helper()
	drivers, cleanup, err := Load(dir, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(cleanup)
	if len(drivers) != 1 || drivers[0].Name() != "echo" {
		t.Fatalf("loaded %d drivers", len(drivers))
	}
	return drivers[0], cleanup
}

func TestPluginEndToEnd(t *testing.T) {
	t.Setenv("ECHO_STATE_DIR", t.TempDir())
	d, _ := load(t, pluginDir(t))
	ctx := context.Background()
	fp, err := d.Fingerprint(ctx)
	if err != nil || !fp.Healthy || fp.Attributes["driver.echo"] != "1" {
		t.Fatalf("fingerprint %+v, %v", fp, err)
	}

	cfg := dt.TaskConfig(t, "hello", "sh", "-c", "echo hello from $NAME; read x < ./go; exit 5")
	cfg.Env["NAME"] = "plugin"
	if err := exec.Command("mkfifo", filepath.Join(cfg.TaskDir, "go")).Run(); err != nil {
		t.Fatal(err)
	}
	h := dt.Start(t, d, cfg)
	if h.Version != 1 || h.State != driver.TaskStateRunning || len(h.DriverState) == 0 {
		t.Fatalf("handle %+v", h)
	}
	if _, err := d.StartTask(cfg); !errors.Is(err, driver.ErrTaskExists) {
		t.Fatalf("duplicate start: %v, want ErrTaskExists", err)
	}
	dt.WaitLog(t, cfg, "hello from plugin")
	st, err := d.InspectTask(cfg.ID)
	if err != nil || st.State != driver.TaskStateRunning || st.PID <= 0 {
		t.Fatalf("inspect %+v, %v", st, err)
	}
	if u, err := d.TaskStats(ctx, cfg.ID); err != nil || len(u.PIDs) == 0 {
		t.Fatalf("stats %+v, %v", u, err)
	}
	exec1, err := d.ExecTask(cfg.ID, []string{"sh", "-c", "echo $NAME; echo e >&2; exit 2"}, dt.Timeout)
	if err != nil || exec1.ExitCode != 2 || string(exec1.Stdout) != "plugin\n" || string(exec1.Stderr) != "e\n" {
		t.Fatalf("ExecTask %+v, %v", exec1, err)
	}
	if res, err := d.ExecTask(cfg.ID, []string{"sleep", "60"}, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || res == nil {
		t.Fatalf("timed-out ExecTask: %+v, %v", res, err)
	}
	se := d.(driver.StreamingExecer)
	var out bytes.Buffer
	code, err := se.ExecTaskStreaming(ctx, cfg.ID, &driver.ExecOptions{Command: []string{"cat"}, Stdin: strings.NewReader("streamed\n"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "streamed\n" {
		t.Fatalf("ExecTaskStreaming: %d, %v, %q", code, err, out.String())
	}
	dt.CheckTTYExec(t, se, cfg.ID)

	// Release the task and wait for its real exit code.
	if err := os.WriteFile(filepath.Join(cfg.TaskDir, "go"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := dt.Wait(t, d, cfg.ID)
	if res.ExitCode != 5 || res.Err != nil {
		t.Fatalf("exit %+v, want 5", res)
	}
	if err := d.StopTask(cfg.ID, time.Second, "SIGTERM"); err != nil {
		t.Fatalf("StopTask of an exited task: %v", err)
	}
	if err := d.DestroyTask(cfg.ID, false); err != nil {
		t.Fatal(err)
	}
}

func TestPluginErrors(t *testing.T) {
	t.Setenv("ECHO_STATE_DIR", t.TempDir())
	d, _ := load(t, pluginDir(t))
	ctx := context.Background()
	notFound := map[string]func() error{
		"WaitTask":    func() error { _, err := d.WaitTask(ctx, "nope"); return err },
		"StopTask":    func() error { return d.StopTask("nope", time.Second, "") },
		"DestroyTask": func() error { return d.DestroyTask("nope", true) },
		"InspectTask": func() error { _, err := d.InspectTask("nope"); return err },
		"TaskStats":   func() error { _, err := d.TaskStats(ctx, "nope"); return err },
		"SignalTask":  func() error { return d.SignalTask("nope", "SIGHUP") },
		"ExecTask":    func() error { _, err := d.ExecTask("nope", []string{"true"}, time.Second); return err },
		"ExecTaskStreaming": func() error {
			_, err := d.(driver.StreamingExecer).ExecTaskStreaming(ctx, "nope", &driver.ExecOptions{Command: []string{"true"}})
			return err
		},
	}
	for name, call := range notFound {
		if err := call(); !errors.Is(err, driver.ErrTaskNotFound) || !strings.Contains(err.Error(), "nope") {
			t.Errorf("%s: %v, want ErrTaskNotFound", name, err)
		}
	}
	cfg := dt.TaskConfig(t, "bad", "/nope")
	if _, err := d.StartTask(cfg); err == nil || !strings.Contains(err.Error(), `exec: "/nope"`) || errors.Is(err, driver.ErrUnrecoverable) {
		t.Fatalf("bad command: %v, want a recoverable error", err)
	}
	// An invalid config stays unrecoverable across the plugin boundary,
	// so the task runner fails the task at once.
	invalid := dt.TaskConfig(t, "invalid", "true")
	delete(invalid.Config, "command")
	if _, err := d.StartTask(invalid); !errors.Is(err, driver.ErrUnrecoverable) || !strings.Contains(err.Error(), "command is required") {
		t.Fatalf("missing command: %v, want ErrUnrecoverable", err)
	}
	if err := d.RecoverTask(&driver.TaskHandle{Version: 7, Config: cfg}); !errors.Is(err, driver.ErrHandleVersion) {
		t.Fatalf("RecoverTask: %v, want ErrHandleVersion", err)
	}
}

// TestPluginRestart: the plugin process (as after an agent restart) is
// replaced; the new one recovers the running task from its handle.
func TestPluginRestart(t *testing.T) {
	t.Setenv("ECHO_STATE_DIR", t.TempDir())
	// Killing plugin A orphans the task's executor; as a subreaper this
	// test adopts it and reaps it at the end (this sandbox's init does not).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	dir := pluginDir(t)
	a, killA := load(t, dir)
	cfg := dt.TaskConfig(t, "lasting", "sh", "-c", "echo up; while [ ! -e done ]; do sleep 0.05; done; exit 9")
	h, err := a.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "up")
	killA()
	if _, err := a.InspectTask(cfg.ID); err == nil {
		t.Fatal("a killed plugin still answers")
	}
	b, _ := load(t, dir)
	if err := b.RecoverTask(h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { _ = b.DestroyTask(cfg.ID, true) })
	if st, err := b.InspectTask(cfg.ID); err != nil || st.State != driver.TaskStateRunning {
		t.Fatalf("recovered %+v, %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(cfg.TaskDir, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := dt.Wait(t, b, cfg.ID); res.ExitCode != 9 {
		t.Fatalf("exit %+v, want 9", res)
	}
	var ds struct {
		ExecutorPID int `json:"executor_pid"`
	}
	if err := json.Unmarshal(h.DriverState, &ds); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, dt.Timeout, "the orphaned executor to be reaped", func() bool {
		pid, err := unix.Wait4(ds.ExecutorPID, nil, unix.WNOHANG, nil)
		return pid == ds.ExecutorPID || errors.Is(err, unix.ECHILD)
	})
}

func TestLoadErrors(t *testing.T) {
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Fatal("missing dir accepted")
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	drivers, cleanup, err := Load(empty, nil)
	if err != nil || len(drivers) != 0 {
		t.Fatalf("dir without plugins: %v, %v", drivers, err)
	}
	cleanup()
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "impostor"), []byte("#!/bin/sh\necho not a plugin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(bad, nil); err == nil || !strings.Contains(err.Error(), "impostor") {
		t.Fatalf("non-plugin executable: %v", err)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("task x: %w", driver.ErrTaskNotFound), codes.NotFound},
		{fmt.Errorf("start: %w", driver.ErrTaskExists), codes.AlreadyExists},
		{driver.ErrHandleVersion, codes.FailedPrecondition},
		{driver.ErrNotSupported, codes.Unimplemented},
		{fmt.Errorf("exec: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("start: %w", driver.ErrUnrecoverable), codes.InvalidArgument},
		{errors.New("boom"), codes.Unknown},
	}
	for _, tc := range tests {
		st := toStatus(tc.err)
		if status.Code(st) != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, status.Code(st), tc.code)
		}
		for name, back := range map[string]error{"status": fromStatus(st), "body": toWireError(tc.err).toError()} {
			if back.Error() != tc.err.Error() {
				t.Errorf("%s: message %q, want %q", name, back, tc.err)
			}
			if errors.Unwrap(tc.err) != nil && !errors.Is(back, errors.Unwrap(tc.err)) {
				t.Errorf("%s: %v lost its sentinel", name, back)
			}
			if tc.code == codes.Unknown && errors.Unwrap(back) != nil {
				t.Errorf("%s: plain error gained a sentinel", name)
			}
		}
	}
	if toStatus(nil) != nil || fromStatus(nil) != nil || toWireError(nil) != nil || (*wireError)(nil).toError() != nil {
		t.Fatal("nil errors must stay nil")
	}
}
