package rawexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/driver/internal/procfs"
)

func TestMain(m *testing.M) {
	dt.DispatchExecutor()
	os.Exit(m.Run())
}

func newDriver(t *testing.T, stateDir string) *Driver {
	t.Helper()
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	return New(Config{StateDir: stateDir}, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
}

func TestFingerprint(t *testing.T) {
	d := newDriver(t, "")
	fp, err := d.Fingerprint(context.Background())
	if err != nil || !fp.Detected || !fp.Healthy || fp.Attributes["driver.raw_exec"] != "1" {
		t.Fatalf("fingerprint %+v, %v", fp, err)
	}
	if d.Name() != "raw_exec" {
		t.Fatalf("name %q", d.Name())
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal int
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 3", 3, 0},
		{"killed by signal", "kill -TERM $$", 128 + 15, 15},
	}
	d := newDriver(t, "")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dt.TaskConfig(t, "web", "sh", "-c", tc.script)
			h := dt.Start(t, d, cfg)
			if h.Version != 1 || h.State != driver.TaskStateRunning || len(h.DriverState) == 0 || h.Config != cfg {
				t.Fatalf("bad handle %+v", h)
			}
			res := dt.Wait(t, d, cfg.ID)
			if res.ExitCode != tc.wantCode || res.Signal != tc.wantSignal || res.Err != nil {
				t.Fatalf("exit %+v, want code %d signal %d", res, tc.wantCode, tc.wantSignal)
			}
			if res.Successful() != (tc.wantCode == 0) {
				t.Fatalf("Successful() = %v", res.Successful())
			}
			st, err := d.InspectTask(cfg.ID)
			if err != nil || st.State != driver.TaskStateExited || st.ExitResult.ExitCode != tc.wantCode || st.CompletedAt.IsZero() {
				t.Fatalf("inspect %+v, %v", st, err)
			}
		})
	}
}

func TestEnvCwdAndArgs(t *testing.T) {
	d := newDriver(t, "")
	os.Setenv("MESHLET_AGENT_ONLY", "leak")
	defer os.Unsetenv("MESHLET_AGENT_ONLY")
	cfg := dt.TaskConfig(t, "web", "sh", "-c", `echo "foo=$FOO"; pwd; echo "agent=${MESHLET_AGENT_ONLY:-unset}"; echo "arg=$0"; echo oops >&2`)
	cfg.Config["args"] = []any{"-c", cfg.Config["args"].([]any)[1], 8080}
	cfg.Env["FOO"] = "bar baz"
	dt.Start(t, d, cfg)
	if res := dt.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit %+v", res)
	}
	want := "foo=bar baz\n" + cfg.TaskDir + "\nagent=unset\narg=8080\n"
	if got := dt.Log(t, cfg, "stdout"); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	if got := dt.Log(t, cfg, "stderr"); got != "oops\n" {
		t.Fatalf("stderr %q", got)
	}
}

func TestLogRotation(t *testing.T) {
	d := newDriver(t, "")
	const total = 3*1<<20 + 1000
	cfg := dt.TaskConfig(t, "chatty", "sh", "-c", "yes 0123456789abcdef | head -c 3146728")
	cfg.LogMaxFiles, cfg.LogMaxFileSizeMB = 2, 1
	dt.Start(t, d, cfg)
	if res := dt.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit %+v", res)
	}
	logs := filepath.Join(cfg.AllocDir, "logs")
	entries, err := os.ReadDir(logs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"chatty.stderr.0", "chatty.stdout.2", "chatty.stdout.3"}
	if !slices.Equal(names, want) {
		t.Fatalf("log files %v, want %v", names, want)
	}
	for name, size := range map[string]int64{"chatty.stdout.2": 1 << 20, "chatty.stdout.3": total - 3<<20} {
		st, err := os.Stat(filepath.Join(logs, name))
		if err != nil || st.Size() != size {
			t.Fatalf("%s: size %v (%v), want %d", name, st, err, size)
		}
	}
	if got := dt.Log(t, cfg, "stdout"); len(got) != 1<<20+total-3<<20 || !strings.HasPrefix(got, "f\n0123456789abcdef\n") {
		t.Fatalf("read back %d bytes starting %.20q", len(got), got)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	d := newDriver(t, "")
	cfg := dt.TaskConfig(t, "stubborn", "sh", "-c", `trap "echo ignored-term" TERM; echo ready; while :; do sleep 0.1; done`)
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "ready")
	if err := d.StopTask(cfg.ID, 500*time.Millisecond, "SIGTERM"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	res := dt.Wait(t, d, cfg.ID)
	if res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit %+v, want SIGKILL", res)
	}
	dt.WaitLog(t, cfg, "ignored-term")
}

func TestStopGraceful(t *testing.T) {
	d := newDriver(t, "")
	cfg := dt.TaskConfig(t, "polite", "sh", "-c", `trap "echo bye; exit 0" INT; echo ready; while :; do sleep 0.1; done`)
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "ready")
	if err := d.StopTask(cfg.ID, time.Minute, "SIGINT"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	if res := dt.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit %+v, want a clean exit from the trap", res)
	}
	if err := d.StopTask(cfg.ID, time.Second, "SIGNOPE"); err == nil {
		t.Fatal("bad signal name accepted")
	}
}

func TestStoppedTaskAndDuplicates(t *testing.T) {
	d := newDriver(t, "")
	cfg := dt.TaskConfig(t, "quick", "true")
	dt.Start(t, d, cfg)
	if _, err := d.StartTask(cfg); !errors.Is(err, driver.ErrTaskExists) {
		t.Fatalf("second StartTask: %v, want ErrTaskExists", err)
	}
	dt.Wait(t, d, cfg.ID)
	if err := d.StopTask(cfg.ID, time.Second, ""); err != nil {
		t.Fatalf("StopTask of an exited task: %v", err)
	}
	if err := d.SignalTask(cfg.ID, "SIGHUP"); err == nil {
		t.Fatal("SignalTask of an exited task succeeded")
	}
	if _, err := d.TaskStats(context.Background(), cfg.ID); err == nil {
		t.Fatal("TaskStats of an exited task succeeded")
	}
}

func TestUnknownTask(t *testing.T) {
	d := newDriver(t, "")
	ctx := context.Background()
	calls := map[string]func() error{
		"WaitTask":    func() error { _, err := d.WaitTask(ctx, "nope"); return err },
		"StopTask":    func() error { return d.StopTask("nope", time.Second, "") },
		"DestroyTask": func() error { return d.DestroyTask("nope", true) },
		"InspectTask": func() error { _, err := d.InspectTask("nope"); return err },
		"TaskStats":   func() error { _, err := d.TaskStats(ctx, "nope"); return err },
		"SignalTask":  func() error { return d.SignalTask("nope", "SIGHUP") },
		"ExecTask":    func() error { _, err := d.ExecTask("nope", []string{"true"}, time.Second); return err },
		"ExecTaskStreaming": func() error {
			_, err := d.ExecTaskStreaming(ctx, "nope", &driver.ExecOptions{Command: []string{"true"}})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, driver.ErrTaskNotFound) {
			t.Errorf("%s: %v, want ErrTaskNotFound", name, err)
		}
	}
}

func TestBadCommand(t *testing.T) {
	// A config error is unrecoverable; a missing executable may appear
	// (installed, written by a template) and is not.
	tests := []struct {
		name          string
		config        map[string]any
		want          string
		unrecoverable bool
	}{
		{"missing command", map[string]any{}, "command is required", true},
		{"command not a string", map[string]any{"command": 3}, "non-empty string", true},
		{"no such file", map[string]any{"command": "/nope"}, `exec: "/nope": stat /nope: no such file or directory`, false},
		{"not in PATH", map[string]any{"command": "no-such-binary-meshlet"}, "executable file not found", false},
		{"bad args", map[string]any{"command": "true", "args": "a b"}, "args must be a list", true},
		{"bad arg element", map[string]any{"command": "true", "args": []any{map[string]any{}}}, "args[0]", true},
	}
	stateDir := t.TempDir()
	d := newDriver(t, stateDir)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dt.TaskConfig(t, "bad", "true")
			cfg.Config = tc.config
			_, err := d.StartTask(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("StartTask: %v, want one line mentioning %q", err, tc.want)
			}
			if got := errors.Is(err, driver.ErrUnrecoverable); got != tc.unrecoverable {
				t.Fatalf("StartTask: %v unrecoverable = %v, want %v", err, got, tc.unrecoverable)
			}
			if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
				t.Fatalf("failed task is known: %v", err)
			}
			if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
				t.Fatalf("state left behind: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(cfg.AllocDir, "logs")); !os.IsNotExist(err) {
				t.Fatalf("log dir created: %v", err)
			}
		})
	}
}

// TestStartFailureInExecutor covers an error only the executor can see
// (the working directory vanished after validation).
func TestStartFailureInExecutor(t *testing.T) {
	stateDir := t.TempDir()
	d := newDriver(t, stateDir)
	cfg := dt.TaskConfig(t, "gone", "/bin/true")
	cfg.TaskDir = filepath.Join(cfg.TaskDir, "missing")
	_, err := d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("StartTask: %v", err)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state left behind: %v", entries)
	}
}

func TestSignalStatsDestroy(t *testing.T) {
	stateDir := t.TempDir()
	d := newDriver(t, stateDir)
	cfg := dt.TaskConfig(t, "sig", "sh", "-c", `trap "echo got-hup" HUP; echo ready; while :; do sleep 0.05; done`)
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "ready")
	if err := d.SignalTask(cfg.ID, "hup"); err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "got-hup")
	st, err := d.InspectTask(cfg.ID)
	if err != nil || st.State != driver.TaskStateRunning || st.PID <= 0 {
		t.Fatalf("inspect %+v, %v", st, err)
	}
	u, err := d.TaskStats(context.Background(), cfg.ID)
	if err != nil || !slices.Contains(u.PIDs, st.PID) || u.MemoryRSS == 0 || u.Timestamp.IsZero() {
		t.Fatalf("stats %+v, %v", u, err)
	}
	start, err := procfs.StartTime(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DestroyTask(cfg.ID, false); err == nil {
		t.Fatal("DestroyTask without force destroyed a running task")
	}
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Fatal(err)
	}
	if procfs.Alive(st.PID, start) {
		t.Fatal("task still alive after forced destroy")
	}
	if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("destroyed task still known: %v", err)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state left behind: %v", entries)
	}
}

// TestNoLeakedFDs: the task inherits only stdin, stdout and stderr (ls
// itself opens fd 3 to read the directory).
func TestNoLeakedFDs(t *testing.T) {
	d := newDriver(t, "")
	cfg := dt.TaskConfig(t, "fds", "ls", "/proc/self/fd")
	dt.Start(t, d, cfg)
	dt.Wait(t, d, cfg.ID)
	if got := dt.Log(t, cfg, "stdout"); got != "0\n1\n2\n3\n" {
		t.Fatalf("task fds %q", got)
	}
}
