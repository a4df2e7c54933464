package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

var daemon *dockertest.Daemon

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m, &daemon)) }

// newDriver is a driver on the private daemon, closed at cleanup.
func newDriver(t *testing.T, cfg docker.Config) *docker.Driver {
	t.Helper()
	daemon.Require(t)
	cfg.Endpoint = daemon.Host
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	d := docker.New(cfg, hclog.New(&hclog.LoggerOptions{Name: "docker", Level: hclog.Debug, Output: os.Stderr}))
	t.Cleanup(func() { d.Close() })
	return d
}

// taskConfig runs argv in the busybox image, in network mode none.
func taskConfig(t *testing.T, name string, argv ...string) *driver.TaskConfig {
	t.Helper()
	cfg := drivertest.TaskConfig(t, name, argv...)
	cfg.Config["image"] = dockertest.Image
	cfg.Config["network_mode"] = "none"
	for _, dir := range []string{"local", "secrets"} {
		if err := os.MkdirAll(filepath.Join(cfg.TaskDir, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func TestFingerprintPrivateDaemon(t *testing.T) {
	d := newDriver(t, docker.Config{})
	fp, err := d.Fingerprint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !fp.Detected || !fp.Healthy {
		t.Fatalf("fingerprint = %+v, want detected and healthy", fp)
	}
	if fp.Attributes["driver.docker"] != "1" || fp.Attributes["driver.docker.version"] == "" {
		t.Errorf("attributes = %v, want driver.docker and driver.docker.version", fp.Attributes)
	}
	if rt := fp.Attributes["driver.docker.runtimes"]; !strings.Contains(rt, "runc") {
		t.Errorf("runtimes = %q, want runc listed", rt)
	}
	if v := fp.Attributes["driver.docker.api_version"]; v == "" || v > "1.51" {
		t.Errorf("api_version = %q, want the negotiated version", v)
	}
	if err := d.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestFingerprintMissingSocket(t *testing.T) {
	d := docker.New(docker.Config{Endpoint: "unix://" + filepath.Join(t.TempDir(), "no.sock")}, hclog.NewNullLogger())
	defer d.Close()
	fp, err := d.Fingerprint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fp.Detected || fp.Healthy || !strings.Contains(fp.HealthDescription, "no.sock") {
		t.Errorf("fingerprint = %+v, want undetected and unhealthy, naming the socket", fp)
	}
	if err := d.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "no.sock") {
		t.Errorf("Ping = %v, want an error naming the socket", err)
	}
}

func TestExitCodeAndLogs(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "web", "sh", "-c", "echo out1; echo err1 >&2; echo out2; exit 3")
	drivertest.Start(t, d, cfg)
	res := drivertest.Wait(t, d, cfg.ID)
	if res.ExitCode != 3 || res.OOMKilled || res.Err != nil {
		t.Errorf("exit = %+v, want code 3", res)
	}
	if got := drivertest.Log(t, cfg, "stdout"); got != "out1\nout2\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := drivertest.Log(t, cfg, "stderr"); got != "err1\n" {
		t.Errorf("stderr = %q", got)
	}
	st, err := d.InspectTask(cfg.ID)
	if err != nil || st.State != driver.TaskStateExited || st.ExitResult.ExitCode != 3 {
		t.Errorf("InspectTask = %+v, %v", st, err)
	}
}

func TestTaskDirsEnvAndUser(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "dirs", "sh", "-c", `id -u; echo $NOMAD_TASK_DIR $NOMAD_SECRETS_DIR $NOMAD_ALLOC_DIR; cat /local/in /secrets/s; echo shared > /alloc/out; ls /sys/class/net; echo $PATH`)
	cfg.User = "nobody"
	cfg.Env["NOMAD_TASK_DIR"] = filepath.Join(cfg.TaskDir, "local")
	cfg.Env["NOMAD_SECRETS_DIR"] = filepath.Join(cfg.TaskDir, "secrets")
	cfg.Env["NOMAD_ALLOC_DIR"] = cfg.AllocDir
	for path, body := range map[string]string{"local/in": "in\n", "secrets/s": "s\n"} {
		if err := os.WriteFile(filepath.Join(cfg.TaskDir, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(cfg.AllocDir, 0o777); err != nil {
		t.Fatal(err)
	}
	drivertest.Start(t, d, cfg)
	if res := drivertest.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit = %+v, stderr %q", res, drivertest.Log(t, cfg, "stderr"))
	}
	want := "65534\n/local /secrets /alloc\nin\ns\nlo\n" + dockertest.ImagePath + "\n"
	if got := drivertest.Log(t, cfg, "stdout"); got != want {
		t.Errorf("stdout = %q, want %q (user nobody, moved dirs, network none, the image's PATH)", got, want)
	}
	// A PATH the job sets wins over the image's.
	own := taskConfig(t, "path", "sh", "-c", "echo $PATH")
	own.Env["PATH"] = "/bin:/job/bin"
	drivertest.Start(t, d, own)
	drivertest.Wait(t, d, own.ID)
	if got := drivertest.Log(t, own, "stdout"); got != "/bin:/job/bin\n" {
		t.Errorf("PATH set by the job = %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.AllocDir, "out")); err != nil || string(b) != "shared\n" {
		t.Errorf("alloc/out = %q, %v", b, err)
	}
}

// Without kill_signal a task is stopped with its image's STOPSIGNAL, as
// `docker stop` and Nomad's driver do (nginx's SIGQUIT, postgres' SIGINT).
func TestStopWithImageStopSignal(t *testing.T) {
	d := newDriver(t, docker.Config{})
	const img = "meshlet-test/stopsignal:usr1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An image with a STOPSIGNAL: the test image committed with one (an
	// import cannot set it).
	c := daemon.Client(t)
	base, err := c.ContainerCreate(ctx, &container.Config{Image: dockertest.Image, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.ContainerRemove(ctx, base.ID, container.RemoveOptions{Force: true}) }()
	if _, err := c.ContainerCommit(ctx, base.ID, container.CommitOptions{Reference: img, Config: &container.Config{StopSignal: "SIGUSR1"}}); err != nil {
		t.Fatal(err)
	}
	cfg := taskConfig(t, "usr1", "sh", "-c", `trap 'echo got-usr1; exit 42' USR1; echo ready; while true; do sleep 0.1; done`)
	cfg.Config["image"] = img
	drivertest.Start(t, d, cfg)
	drivertest.WaitLog(t, cfg, "ready")
	if err := d.StopTask(cfg.ID, 10*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if res := drivertest.Wait(t, d, cfg.ID); res.ExitCode != 42 {
		t.Errorf("exit = %+v, want 42 (the image's STOPSIGNAL handled)", res)
	}
}

func TestStopSignalThenKill(t *testing.T) {
	d := newDriver(t, docker.Config{})
	// Handles SIGTERM: stops with the code it chooses.
	polite := taskConfig(t, "polite", "sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while true; do sleep 0.1; done`)
	drivertest.Start(t, d, polite)
	drivertest.WaitLog(t, polite, "ready")
	if err := d.StopTask(polite.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if res := drivertest.Wait(t, d, polite.ID); res.ExitCode != 7 {
		t.Errorf("polite exit = %+v, want 7", res)
	}
	if got := drivertest.Log(t, polite, "stdout"); !strings.Contains(got, "got-term") {
		t.Errorf("stdout = %q, want got-term", got)
	}
	// Ignores SIGTERM (PID 1 without a handler): killed after the timeout.
	stubborn := taskConfig(t, "stubborn", "sh", "-c", `trap '' TERM; echo ready; while true; do sleep 0.1; done`)
	drivertest.Start(t, d, stubborn)
	drivertest.WaitLog(t, stubborn, "ready")
	start := time.Now()
	if err := d.StopTask(stubborn.ID, 700*time.Millisecond, ""); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 700*time.Millisecond {
		t.Errorf("stopped after %s, before the timeout", el)
	}
	if res := drivertest.Wait(t, d, stubborn.ID); res.ExitCode != 137 {
		t.Errorf("stubborn exit = %+v, want 137 (SIGKILL)", res)
	}
	// Stopping again is success.
	if err := d.StopTask(stubborn.ID, time.Second, ""); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestSignalAndExec(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "sig", "sh", "-c", `trap 'echo got-hup' HUP; echo ready; while true; do sleep 0.1; done`)
	cfg.Env["GREETING"] = "hello"
	drivertest.Start(t, d, cfg)
	drivertest.WaitLog(t, cfg, "ready")
	if err := d.SignalTask(cfg.ID, "SIGHUP"); err != nil {
		t.Fatal(err)
	}
	drivertest.WaitLog(t, cfg, "got-hup")
	res, err := d.ExecTask(cfg.ID, []string{"sh", "-c", "echo $GREETING; echo oops >&2; exit 4"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 || string(res.Stdout) != "hello\n" || string(res.Stderr) != "oops\n" {
		t.Errorf("exec = code %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if _, err := d.ExecTask("nope", []string{"true"}, time.Second); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Errorf("exec in unknown task: %v", err)
	}
}

// alloc exec: stdin reaches the command, output streams, cancelling the
// context ends a command that would run on.
func TestExecStreaming(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "stream", "sleep", "300")
	drivertest.Start(t, d, cfg)
	var out, errOut strings.Builder
	code, err := d.ExecTaskStreaming(context.Background(), cfg.ID, &driver.ExecOptions{
		Command: []string{"sh", "-c", "read x; echo got-$x; echo e >&2; exit 3"},
		Stdin:   strings.NewReader("ping\n"), Stdout: &out, Stderr: &errOut,
	})
	if err != nil || code != 3 || out.String() != "got-ping\n" || errOut.String() != "e\n" {
		t.Errorf("exec = %d, %v, stdout %q stderr %q", code, err, out.String(), errOut.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := d.ExecTaskStreaming(ctx, cfg.ID, &driver.ExecOptions{
		Command: []string{"sh", "-c", "echo $$ > /tmp/execpid; exec sleep 60"},
	}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled exec: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("cancelled exec returned after %s", time.Since(start))
	}
	// The cancelled command is gone (or a zombie awaiting its reaper).
	gone := `p=$(cat /tmp/execpid); test ! -e /proc/$p || grep -q ') Z ' /proc/$p/stat`
	testutil.WaitFor(t, drivertest.Timeout, "cancelled exec killed", func() bool {
		res, err := d.ExecTask(cfg.ID, []string{"sh", "-c", gone}, 10*time.Second)
		return err == nil && res.ExitCode == 0
	})
}
