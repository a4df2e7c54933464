package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/uuid"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// taskLogs reads a task's whole log stream through the API (alloc logs).
func taskLogs(t *testing.T, b api.Backend, allocID, task, stream string) string {
	t.Helper()
	rc, err := b.TaskLogs(context.Background(), api.LogRequest{AllocID: allocID, Task: task, Type: stream, Origin: "start"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	return string(out)
}

// TestDockerTaskSharesBridgeNamespace: in a bridge group, a docker task
// and a raw_exec task share the allocation's namespace (the raw_exec task
// reaches the container's server on 127.0.0.1), the port mapping reaches
// the container from the host, alloc logs serve the container's output,
// and stopping the job removes the containers, pause container included.
func TestDockerTaskSharesBridgeNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	cni := cniPath(t)
	d, err := dockertest.Start()
	if err != nil {
		t.Skip("no private dockerd: " + err.Error())
	}
	t.Cleanup(d.Stop)
	bridge := "mt" + uuid.NewString()[:8]
	subnet := fmt.Sprintf("10.98.%d.0/24", rand.IntN(250)+1)
	cleanupBridge(t, bridge)
	a := startAgentWith(t, t.TempDir(), func(c *Config) {
		c.Client.CNIPath, c.Client.BridgeNetworkName, c.Client.BridgeNetworkSubnet = cni, bridge, subnet
		c.Plugins = map[string]PluginConfig{docker.Name: {Docker: &DockerPluginConfig{Endpoint: d.Host}}}
	})
	cleanupJob(t, &a, "dockbridge")
	if fp := a.Client().Node().Drivers[docker.Name]; fp == nil || !fp.Detected || !fp.Healthy {
		t.Fatalf("docker on the node = %+v", fp)
	}
	src := fmt.Sprintf(`
job "dockbridge" {
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    task "web" {
      driver = "docker"
      config {
        image   = %q
        command = "sh"
        args    = ["-c", "echo hello-$NOMAD_ALLOC_ID > /tmp/index.html; echo serving; exec httpd -f -p 8080 -h /tmp"]
        ports   = ["http"]
      }
    }
    task "probe" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "until /bin/busybox wget -qO- http://127.0.0.1:8080/; do sleep 0.2; done; sleep 300"]
      }
    }
  }
}`, dockertest.Image)
	if _, err := a.Backend().RegisterJob(context.Background(), parseJob(t, src)); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "dockbridge", structs.AllocClientStatusRunning)
	want := "hello-" + alloc.ID + "\n"
	testutil.WaitFor(t, hang, "raw_exec task reaching the container on loopback", func() bool {
		return taskLogs(t, a.Backend(), alloc.ID, "probe", "stdout") == want
	})
	if got := taskLogs(t, a.Backend(), alloc.ID, "web", "stdout"); got != "serving\n" {
		t.Errorf("alloc logs of the docker task = %q", got)
	}
	ports := alloc.AllocatedResources.Shared.Ports
	if len(ports) != 1 {
		t.Fatalf("ports = %+v", ports)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Value)
	testutil.WaitFor(t, hang, "container answering on "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body) == want
	})

	stopJob(t, a.Backend(), "dockbridge", false)
	waitAllocStatus(t, a.Backend(), "dockbridge", structs.AllocClientStatusComplete)
	c := d.Client(t)
	testutil.WaitFor(t, hang, "containers of the allocation removed", func() bool {
		list, err := c.ContainerList(context.Background(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", docker.LabelAllocID+"="+alloc.ID))})
		if err == nil && len(list) > 0 {
			names := make([]string, 0, len(list))
			for _, ct := range list {
				names = append(names, strings.Join(ct.Names, ","))
			}
			t.Logf("still there: %v", names)
		}
		return err == nil && len(list) == 0
	})
}
