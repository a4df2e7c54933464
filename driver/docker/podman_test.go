package docker_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// The driver negotiates its API version with podman's Docker-compatible
// service (podman answers with its own version and API 1.41) and runs a
// task through it. podman is not part of `make test-deps`: the test runs
// where it is installed. Where podman cannot start any container (runc
// cannot set the rlimits podman asks for without CAP_SYS_RESOURCE, as in
// some sandboxes, where `podman run` fails the same way), the test stops
// after the fingerprint, saying so.
func TestPodmanCompatibleAPI(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := dockertest.StartPodman()
	if err != nil {
		dockertest.SkipOrFail(t, err)
	}
	t.Cleanup(p.Stop)
	d := docker.New(docker.Config{Endpoint: p.Host, StateDir: t.TempDir()},
		hclog.New(&hclog.LoggerOptions{Name: "docker", Level: hclog.Debug, Output: os.Stderr}))
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fp, err := d.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !fp.Detected || !fp.Healthy {
		t.Fatalf("fingerprint against podman = %+v, want detected and healthy", fp)
	}
	if v := fp.Attributes["driver.docker.api_version"]; v == "" || v > "1.41" {
		t.Errorf("api_version = %q, want the version negotiated with podman (at most 1.41)", v)
	}
	if fp.Attributes["driver.docker.version"] == "" {
		t.Errorf("attributes = %v, want podman's version", fp.Attributes)
	}

	cfg := taskConfig(t, "hello", "echo", "hello from podman")
	if _, err := d.StartTask(cfg); err != nil {
		if strings.Contains(err.Error(), "error setting rlimit") {
			t.Skipf("the fingerprint passed; podman cannot start containers on this machine: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DestroyTask(cfg.ID, true) })
	if res := drivertest.Wait(t, d, cfg.ID); res.ExitCode != 0 {
		t.Errorf("exit = %+v, want 0", res)
	}
	if got := drivertest.Log(t, cfg, "stdout"); got != "hello from podman\n" {
		t.Errorf("stdout = %q", got)
	}
}
