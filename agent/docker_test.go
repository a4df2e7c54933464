package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		dockertest.SkipOrFail(t, err)
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
	if _, err := a.Backend().RegisterJob(context.Background(), parseJob(t, src), api.RegisterOptions{}); err != nil {
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

// TestDockerTaskSurvivesAgentRestart: the container runs on while the
// agent is down; the next agent recovers it (same container, no restart),
// its logs continue with every line exactly once, exec works, and stopping
// the job removes the container.
func TestDockerTaskSurvivesAgentRestart(t *testing.T) {
	testutil.RequireRoot(t)
	d, err := dockertest.Start()
	if err != nil {
		dockertest.SkipOrFail(t, err)
	}
	t.Cleanup(d.Stop)
	dir := t.TempDir()
	tune := func(c *Config) {
		c.Plugins = map[string]PluginConfig{docker.Name: {Docker: &DockerPluginConfig{Endpoint: d.Host}}}
	}
	a := startAgentWith(t, dir, tune)
	cleanupJob(t, &a, "dockrestart")
	src := fmt.Sprintf(`
job "dockrestart" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image        = %q
        network_mode = "none"
        command      = "sh"
        args         = ["-c", "i=0; while true; do echo tick$i; i=$((i+1)); sleep 0.1; done"]
      }
    }
  }
}`, dockertest.Image)
	ctx := context.Background()
	if _, err := a.Backend().RegisterJob(ctx, parseJob(t, src), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "dockrestart", structs.AllocClientStatusRunning)
	testutil.WaitFor(t, hang, "first ticks", func() bool {
		return strings.Contains(readLogs(t, a.Backend(), alloc.ID, "stdout"), "tick3\n")
	})
	c := d.Client(t)
	byAlloc := container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelAllocID+"="+alloc.ID))}
	before, err := c.ContainerList(ctx, byAlloc)
	if err != nil || len(before) != 1 {
		t.Fatalf("containers = %v, %v", before, err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	seen := readLinesOnDisk(t, dir, alloc.ID)
	time.Sleep(time.Second) // ticks nobody follows

	a = startAgentWith(t, dir, tune)
	b := a.Backend()
	testutil.WaitFor(t, hang, "ticks after the restart", func() bool {
		got := onlyAlloc(t, b, "dockrestart")
		return got.ClientStatus == structs.AllocClientStatusRunning &&
			strings.Count(readLogs(t, b, alloc.ID, "stdout"), "\n") > seen+15
	})
	if got := onlyAlloc(t, b, "dockrestart"); got.TaskStates["t"].Restarts != 0 {
		t.Errorf("task restarted across the agent restart: %+v", got.TaskStates["t"])
	}
	after, err := c.ContainerList(ctx, byAlloc)
	if err != nil || len(after) != 1 || after[0].ID != before[0].ID || after[0].State != "running" {
		t.Errorf("containers after restart = %+v, %v; want the same one running", after, err)
	}
	lines := strings.Split(strings.TrimSuffix(readLogs(t, b, alloc.ID, "stdout"), "\n"), "\n")
	for i, l := range lines {
		if l != fmt.Sprintf("tick%d", i) {
			t.Fatalf("log line %d = %q, want tick%d (lost or repeated across the restart)", i, l, i)
		}
	}
	var out strings.Builder
	if code, err := b.ExecTask(ctx, api.ExecRequest{AllocID: alloc.ID, Cmd: []string{"echo", "in-container"}, Stdout: &out}); err != nil || code != 0 || out.String() != "in-container\n" {
		t.Errorf("exec after recovery: %d, %v, %q", code, err, out.String())
	}
	stopJob(t, b, "dockrestart", false)
	waitAllocStatus(t, b, "dockrestart", structs.AllocClientStatusComplete)
	testutil.WaitFor(t, hang, "container removed", func() bool {
		list, err := c.ContainerList(ctx, byAlloc)
		return err == nil && len(list) == 0
	})
}

// readLinesOnDisk counts the lines of task t's stdout files while no agent
// runs.
func readLinesOnDisk(t *testing.T, dataDir, allocID string) int {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dataDir, "alloc", allocID, "alloc", "logs", "t.stdout.*"))
	n := 0
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "\n")
	}
	if n == 0 {
		t.Fatalf("no log lines on disk (%v)", matches)
	}
	return n
}
