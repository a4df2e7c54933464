package docker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// runtimeImage is the stand-in Envoy image of the connect_proxy driver's
// docker runtime (its own name, so TestDockerSidecars' image is not it).
const runtimeImage = "meshlet-e2e/envoy-standin:runtime"

// runtimeAgent starts an agent in sidecar mode auto whose connect_proxy
// driver tries docker (envoy_image image, never pulled: no registry may be
// contacted), then the host's Envoy (none here), then the built-in proxy.
func runtimeAgent(t *testing.T, image string, deny bool) *framework.Agent {
	t.Helper()
	return newAgent(t, framework.Options{Sidecar: connect.SidecarAuto, DefaultDeny: deny, ExtraConfig: fmt.Sprintf(
		"plugin \"connect_proxy\" {\n  config {\n    runtimes = [\"docker\", \"envoy\", \"builtin\"]\n    envoy_image = %q\n    envoy_image_pull = false\n  }\n}\n", image)})
}

// importStandIn imports the stand-in Envoy image into the test daemon.
func importStandIn(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := dockertest.ImportBusyboxWith(ctx, daemon.Client(t), runtimeImage,
		[]dockertest.File{{Name: "bin/envoy", Mode: 0o755, Data: []byte(standInEnvoy)}}, `ENTRYPOINT ["/bin/envoy"]`)
	if err != nil {
		t.Fatal(err)
	}
}

// nodeRuntimes is the node attribute listing the runtimes available.
func nodeRuntimes(t *testing.T, a *framework.Agent) string {
	t.Helper()
	nodes, _, err := a.Nomad().Nodes().List(nil)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	n, _, err := a.Nomad().Nodes().Info(nodes[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n.Attributes["driver.connect_proxy.runtimes"]
}

// With the docker driver healthy and the Envoy image present, the node runs
// the injected connect_proxy sidecars as Nomad's Envoy container: the
// stand-in reports Nomad's arguments (for the container's bootstrap), its
// bootstrap names the proxy and the control plane socket where the
// container sees it, and the socket is there (the container shares the
// allocation's namespace and directories). The choice is a task event and
// shows in alloc status; alloc exec runs in the container; an agent
// SIGKILL and restart re-attaches to it; a job stop stops it.
func TestSidecarRuntimeContainer(t *testing.T) {
	testutil.RequireRoot(t)
	daemon.Require(t)
	importStandIn(t)
	a := runtimeAgent(t, runtimeImage, false)
	if got := nodeRuntimes(t, a); got != "docker,builtin" {
		t.Errorf("node attribute driver.connect_proxy.runtimes = %q, want docker,builtin", got)
	}
	r := a.CLI("job", "run", "-detach", "-var", fmt.Sprintf("dashboard_port=%d", testutil.FreePort(t)), "input/countdash.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	api := a.AllocByGroup(a.RunningAllocs("countdash", 2), "api")
	proxyID := connect.ProxyID(connect.ServiceID(api.ID, "api", "count-api", "9001"))
	checkStandIn(t, a, api.ID, "connect-proxy-count-api", proxyID)
	st := a.MustCLI("alloc", "status", api.ID)
	for _, want := range []string{"Sidecar Proxy: Envoy container (" + runtimeImage + ")", "Sidecar runtime: docker"} {
		if !strings.Contains(st, want) {
			t.Errorf("alloc status lacks %q:\n%s", want, st)
		}
	}
	checkSidecarExec(t, a, api.ID, proxyID)

	t.Run("agent killed and restarted", func(t *testing.T) {
		// Kill the agent once both containers run, not while it starts
		// the app's: a kill between creating a container and recording
		// it leaves a container the new agent does not know.
		var before []string
		a.Eventually(30*time.Second, "the sidecar and app containers running", func() bool {
			before = taskContainers(t, api.ID)
			return len(before) == 2 && strings.HasSuffix(before[0], "/running") && strings.HasSuffix(before[1], "/running")
		})
		a.Kill()
		a.Restart()
		a.Eventually(30*time.Second, "the allocations running again after the restart", func() bool {
			return len(a.RunningAllocs("countdash", 2)) == 2
		})
		time.Sleep(5 * time.Second) // time for recovery to (wrongly) start a second container
		if got := taskContainers(t, api.ID); strings.Join(got, " ") != strings.Join(before, " ") {
			t.Errorf("containers %v after the restart, want the same %v", got, before)
		}
		checkSidecarExec(t, a, api.ID, proxyID)
	})

	t.Run("job stop", func(t *testing.T) {
		a.MustCLI("job", "stop", "countdash")
		a.Eventually(45*time.Second, "the sidecar container gone", func() bool {
			for _, c := range taskContainers(t, api.ID) {
				if strings.HasPrefix(c, "connect-proxy-count-api=") && strings.HasSuffix(c, "/running") {
					return false
				}
			}
			return true
		})
		if out := a.CLI("alloc", "logs", api.ID, "connect-proxy-count-api").Stdout; !strings.Contains(out, "stand-in envoy args:") {
			t.Errorf("the sidecar's logs are gone after the stop:\n%s", out)
		}
	})
}

// checkStandIn: the sidecar is a running container of the allocation
// whose stand-in Envoy reports Nomad's arguments and the bootstrap the
// client wrote for the container.
func checkStandIn(t *testing.T, a *framework.Agent, allocID, task, proxyID string) {
	t.Helper()
	got := strings.Join(taskContainers(t, allocID), " ")
	if !strings.Contains(got, task+"=") || !strings.Contains(got, "/running") {
		t.Fatalf("alloc %s: no running %s container: %s", allocID, task, got)
	}
	var out string
	a.Eventually(30*time.Second, "the stand-in envoy reporting its bootstrap", func() bool {
		out = a.CLI("alloc", "logs", allocID, task).Stdout
		return strings.Contains(out, "stand-in envoy ENVOY_UID=")
	})
	for _, want := range []string{
		"stand-in envoy args: -c " + connect.RuntimeBootstrapPath + " -l info --concurrency 1 --disable-hot-restart",
		proxyID,
		"control plane socket present",
		"stand-in envoy ENVOY_UID=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sidecar output lacks %q:\n%s", want, out)
		}
	}
	// protojson varies its spacing: compare without it.
	if want := `"path":"` + connect.ContainerSocketPath() + `"`; !strings.Contains(strings.Join(strings.Fields(out), ""), want) {
		t.Errorf("the bootstrap does not name the socket at the container's path (%s):\n%s", want, out)
	}
}

// checkSidecarExec: alloc exec on the sidecar task runs in its container
// (the stand-in's busybox, the container's /secrets).
func checkSidecarExec(t *testing.T, a *framework.Agent, allocID, proxyID string) {
	t.Helper()
	r := a.Exec(allocID, "connect-proxy-count-api", "cat", connect.RuntimeBootstrapPath)
	if r.Code != 0 || !strings.Contains(r.Stdout, proxyID) {
		t.Errorf("alloc exec cat %s: exit %d\n%s\n%s", connect.RuntimeBootstrapPath, r.Code, r.Stdout, r.Stderr)
	}
}

// Without the Envoy image (and no Envoy on the host) the node runs the
// built-in proxy, says why docker was skipped, and the mesh works.
func TestSidecarRuntimeBuiltinWithoutImage(t *testing.T) {
	const absent = "meshlet-e2e/envoy-absent:none"
	a := runtimeAgent(t, absent, false)
	if got := nodeRuntimes(t, a); got != "builtin" {
		t.Errorf("node attribute driver.connect_proxy.runtimes = %q, want builtin", got)
	}
	port := testutil.FreePort(t)
	r := a.CLI("job", "run", "-detach", "-var", fmt.Sprintf("dashboard_port=%d", port), "input/countdash.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	allocs := a.RunningAllocs("countdash", 2)
	waitCount(t, a, fmt.Sprintf("http://127.0.0.1:%d/", port), 0)
	for _, al := range allocs {
		if got := strings.Join(taskContainers(t, al.ID), " "); strings.Contains(got, "connect-proxy-") {
			t.Errorf("alloc %s: a sidecar container without its image: %s", al.ID, got)
		}
		st := a.MustCLI("alloc", "status", al.ID)
		for _, want := range []string{"Sidecar Proxy: built-in (meshlet connect proxy)", "Sidecar runtime: builtin",
			"skipped docker: image " + absent + " is not present locally"} {
			if !strings.Contains(st, want) {
				t.Errorf("alloc %s status lacks %q:\n%s", al.ID, want, st)
			}
		}
	}
}

// An ingress gateway in bridge mode on the same node runs as the Envoy
// container too: its bootstrap names the gateway's proxy and the control
// plane socket where the container sees it, and the choice shows in alloc
// status.
func TestGatewayRuntimeContainer(t *testing.T) {
	testutil.RequireRoot(t)
	daemon.Require(t)
	importStandIn(t)
	a := runtimeAgent(t, runtimeImage, false)
	port := testutil.FreePort(t)
	if r := a.CLI("job", "run", "-detach", "-var", fmt.Sprintf("port=%d", port), "input/ingress-gw.hcl"); r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "ingress-gw") })
	gw := a.RunningAllocs("ingress-gw", 1)[0]
	proxyID := connect.ServiceID(gw.ID, "gateway", "ingress-gw", strconv.Itoa(port))
	checkStandIn(t, a, gw.ID, "connect-ingress-ingress-gw", proxyID)
	st := a.MustCLI("alloc", "status", gw.ID)
	for _, want := range []string{"Ingress Gateway: ", "(Envoy container (" + runtimeImage + "))", "runtime: docker"} {
		if !strings.Contains(st, want) {
			t.Errorf("alloc status lacks %q:\n%s", want, st)
		}
	}
}
