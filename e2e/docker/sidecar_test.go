package docker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// standInEnvoy is the entrypoint of the stand-in for the Envoy image (no
// Envoy binary or image can be had here): it prints its arguments, the
// bootstrap its -c names, whether the control plane socket is where the
// bootstrap says and its ENVOY_UID, then idles until stopped.
const standInEnvoy = `#!/bin/sh
echo "stand-in envoy args: $*"
if [ "$1" = "-c" ] && [ -r "$2" ]; then echo "bootstrap: $(cat "$2")"; fi
if [ -S /alloc/run/meshlet_grpc.sock ]; then echo "control plane socket present"; fi
echo "stand-in envoy ENVOY_UID=$ENVOY_UID"
trap 'exit 0' TERM INT
while :; do sleep 1; done
`

// With connect { sidecar_driver = "docker" } the injected sidecars are
// containers of the configured image (here the default name, Nomad's
// Envoy image, which is present locally so nothing is pulled), started with
// Nomad's Envoy arguments and the bootstrap the client writes into their
// secrets directory.
func TestDockerSidecars(t *testing.T) {
	testutil.RequireRoot(t)
	daemon.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := dockertest.ImportBusyboxWith(ctx, daemon.Client(t), connect.DefaultSidecarImage,
		[]dockertest.File{{Name: "bin/envoy", Mode: 0o755, Data: []byte(standInEnvoy)}}, `ENTRYPOINT ["/bin/envoy"]`)
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, framework.Options{SidecarDriver: "docker"})
	r := a.CLI("job", "run", "-detach", "-var", fmt.Sprintf("dashboard_port=%d", testutil.FreePort(t)), "input/countdash.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	allocs := a.RunningAllocs("countdash", 2)
	for _, al := range allocs {
		got := strings.Join(containersLabelled(t, docker.LabelAllocID+"="+al.ID), " ")
		if !strings.Contains(got, "connect-proxy-") {
			t.Errorf("alloc %s (%s): no sidecar container: %s", al.ID, al.TaskGroup, got)
		}
	}
	api := a.AllocByGroup(allocs, "api")
	proxyID := connect.ProxyID(connect.ServiceID(api.ID, "api", "count-api", "9001"))
	var out string
	a.Eventually(30*time.Second, "the stand-in envoy reporting its bootstrap", func() bool {
		out = a.CLI("alloc", "logs", api.ID, "connect-proxy-count-api").Stdout
		return strings.Contains(out, "stand-in envoy ENVOY_UID=") // its last line
	})
	if st := a.MustCLI("alloc", "status", api.ID); !strings.Contains(st, "Sidecar Proxy: Envoy container ("+connect.DefaultSidecarImage+")") {
		t.Errorf("alloc status does not name the sidecar's image:\n%s", st)
	}
	for _, want := range []string{
		"stand-in envoy args: -c /secrets/envoy_bootstrap.json -l info --concurrency 1 --disable-hot-restart",
		proxyID,
		connect.ContainerSocketPath(),
		"control plane socket present",
		"stand-in envoy ENVOY_UID=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sidecar output lacks %q:\n%s", want, out)
		}
	}
}
