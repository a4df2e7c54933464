package connectproxy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/internal/testutil"
)

var daemon *dockertest.Daemon

// standInImage is the stand-in for the Envoy image: its entrypoint reports
// its arguments, its bootstrap and its network namespace, then ignores
// SIGTERM (so a stop has to wait for kill_timeout and kill it).
const standInImage = "meshlet-test/envoy-standin:connect_proxy"

const standInEnvoy = `#!/bin/sh
echo "args: $*"
cat "$2"
echo
ls -l /proc/self/ns/net
echo "ENVOY_UID=$ENVOY_UID"
trap '' TERM
while :; do sleep 1; done
`

// containerSetup imports the stand-in image and returns a docker driver on
// the private daemon and the sidecar task, with the container bootstrap the
// client writes (the control plane socket at the container's path).
func containerSetup(t *testing.T) (*docker.Driver, *driver.TaskConfig) {
	t.Helper()
	testutil.RequireRoot(t)
	daemon.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := dockertest.ImportBusyboxWith(ctx, daemon.Client(t), standInImage,
		[]dockertest.File{{Name: "bin/envoy", Mode: 0o755, Data: []byte(standInEnvoy)}}, `ENTRYPOINT ["/bin/envoy"]`)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sidecarTask(t, "", connect.SidecarAuto)
	js, err := envoy.JSON(envoy.BootstrapConfig{ProxyID: cfg.Config["proxy_id"].(string), Cluster: "web",
		GRPCAddr: "unix://" + connect.ContainerSocketPath()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.TaskDir, "secrets", connect.RuntimeBootstrapFile), js, 0o600); err != nil {
		t.Fatal(err)
	}
	return newDockerDriver(t), cfg
}

func newDockerDriver(t *testing.T) *docker.Driver {
	dd := docker.New(docker.Config{Endpoint: daemon.Host, StateDir: filepath.Join(os.TempDir(), "meshlet-cp-docker-"+t.Name())},
		hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	t.Cleanup(func() { _ = dd.Close() })
	return dd
}

func newRuntimeDriver(t *testing.T, dd *docker.Driver, image string, pull bool) *connectproxy.Driver {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return connectproxy.New(connectproxy.Config{Binary: self, StateDir: t.TempDir(), Docker: dd, EnvoyImage: image, EnvoyImagePull: pull},
		hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
}

// The docker runtime runs the sidecar as the image's container in the
// task's network namespace, with Nomad's arguments for the container
// bootstrap plus envoy_args; the handle says so; exec runs in the
// container; a new driver pair (an agent restart) recovers it; a stop
// waits kill_timeout for a container ignoring SIGTERM, then kills it; a
// destroy removes it.
func TestContainerRuntime(t *testing.T) {
	dd, cfg := containerSetup(t)
	d := newRuntimeDriver(t, dd, standInImage, false)
	fp, err := d.Fingerprint(context.Background())
	if err != nil || fp.Attributes["driver.connect_proxy.runtimes"] != "docker,builtin" {
		t.Fatalf("fingerprint %+v, %v: want runtimes docker,builtin", fp, err)
	}
	h := dt.Start(t, d, cfg)
	if h.MessageDetails[connectproxy.DetailRuntime] != connectproxy.RuntimeDocker ||
		h.MessageDetails[connectproxy.DetailProxy] != "Envoy container ("+standInImage+")" || !strings.HasPrefix(h.Message, "Sidecar runtime: docker") {
		t.Fatalf("handle message %q %v", h.Message, h.MessageDetails)
	}
	dt.WaitLog(t, cfg, "ENVOY_UID=")
	out := dt.Log(t, cfg, "stdout")
	for _, want := range []string{
		"args: -c " + connect.RuntimeBootstrapPath + " --concurrency 1 --disable-hot-restart --log-level debug",
		cfg.Config["proxy_id"].(string), connect.ContainerSocketPath(), nsLink(t, cfg.NetNSPath), "ENVOY_UID=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	if r, err := d.ExecTask(cfg.ID, []string{"cat", connect.RuntimeBootstrapPath}, 10*time.Second); err != nil ||
		r.ExitCode != 0 || !strings.Contains(string(r.Stdout), connect.ContainerSocketPath()) {
		t.Fatalf("exec in the container: %+v %v", r, err)
	}

	// An agent restart: new drivers recover the container from the handle.
	if err := dd.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newRuntimeDriver(t, newDockerDriver(t), standInImage, false)
	if err := d2.RecoverTask(h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	if st, err := d2.InspectTask(cfg.ID); err != nil || st.State != driver.TaskStateRunning {
		t.Fatalf("recovered task: %+v %v", st, err)
	}
	if r, err := d2.ExecTask(cfg.ID, []string{"true"}, 10*time.Second); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec after recovery: %+v %v", r, err)
	}
	start := time.Now()
	if err := d2.StopTask(cfg.ID, 2*time.Second, "SIGTERM"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	res := dt.Wait(t, d2, cfg.ID)
	if took := time.Since(start); took < 2*time.Second || res.Signal != 9 && res.ExitCode != 137 {
		t.Errorf("stop took %v with %+v: want SIGKILL after the 2s kill timeout", took, res)
	}
	if err := d2.DestroyTask(cfg.ID, false); err != nil {
		t.Fatalf("DestroyTask: %v", err)
	}
	if _, err := d2.InspectTask(cfg.ID); err == nil {
		t.Error("the task is still known after DestroyTask")
	}
	if _, err := daemon.Client(t).ContainerInspect(context.Background(), containerIDOf(t, h)); err == nil {
		t.Error("the container is still there after DestroyTask")
	}
}

// containerIDOf reads the container's ID from a container sidecar's handle.
func containerIDOf(t *testing.T, h *driver.TaskHandle) string {
	t.Helper()
	var st struct {
		State struct {
			ContainerID string `json:"container_id"`
		} `json:"state"`
	}
	if err := jsonUnmarshal(h.DriverState, &st); err != nil || st.State.ContainerID == "" {
		t.Fatalf("handle state %s: %v", h.DriverState, err)
	}
	return st.State.ContainerID
}

// A docker runtime allowed to pull passes to the next runtime when the
// pull fails (a registry on a closed loopback port: nothing leaves the
// host), and the handle says why.
func TestContainerRuntimePullFailureFallsBack(t *testing.T) {
	dd, cfg := containerSetup(t)
	d := newRuntimeDriver(t, dd, "127.0.0.1:1/meshlet-absent/envoy:none", true)
	h := dt.Start(t, d, cfg)
	if h.MessageDetails[connectproxy.DetailRuntime] != connectproxy.RuntimeBuiltin ||
		!strings.Contains(h.Message, "skipped docker: ") || !strings.Contains(h.Message, "failed to pull image 127.0.0.1:1/meshlet-absent/envoy:none") {
		t.Fatalf("handle message %q %v", h.Message, h.MessageDetails)
	}
	if st, err := d.InspectTask(cfg.ID); err != nil || st.PID == 0 {
		t.Fatalf("the built-in sidecar is not a process of the executor: %+v %v", st, err)
	}
}

// Without the image (and no pull) the docker runtime is skipped; with no
// runtime left StartTask fails saying why, and nothing runs.
func TestContainerRuntimeNoImage(t *testing.T) {
	dd, cfg := containerSetup(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := connectproxy.New(connectproxy.Config{Binary: self, StateDir: t.TempDir(), Docker: dd, EnvoyImage: "meshlet-test/absent:none",
		Runtimes: []string{connectproxy.RuntimeDocker}}, hclog.NewNullLogger())
	_, err = d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "no sidecar runtime available on this node (tried docker: docker: image meshlet-test/absent:none is not present locally") {
		t.Fatalf("StartTask: %v", err)
	}
	if _, err := d.InspectTask(cfg.ID); err == nil {
		t.Error("a task is known after a failed start")
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
