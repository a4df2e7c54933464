package cluster

import (
	"strings"
	"testing"
	"time"
)

// echoJob runs one raw_exec task that prints a line and stays up.
func echoJob(id, line string) string {
	return `job "` + id + `" {
  datacenters = ["dc1"]

  group "g" {
    task "echo" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo ` + line + `; exec sleep 3600"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`
}

// TestLogsExecAndAPIAcrossNodes: a server agent reaches an allocation
// that runs on a client node for `alloc logs` and `alloc exec` (it
// forwards to the node's agent), and a client-only agent answers the
// whole /v1 API by forwarding to its servers.
func TestLogsExecAndAPIAcrossNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1 := c.AddClient("c1", 5, s1)
	c.WaitNodesReady(60*time.Second, s1, c1)

	c.RunJobCLI(s1, "echo", echoJob("echo", "hello-from-c1"))
	allocs, _ := c.WaitRunning(s1, "echo", 1, 60*time.Second)
	id := allocs[0].ID

	var logs string
	poll(t, 20*time.Second, "task output through the server", func() (bool, string) {
		out, err := c.CLI(s1, "alloc", "logs", id)
		logs = out
		return err == nil && strings.Contains(out, "hello-from-c1"), out
	})
	out, err := c.CLI(s1, "alloc", "exec", id, "/bin/echo", "exec-on-c1")
	if err != nil || !strings.Contains(out, "exec-on-c1") {
		t.Errorf("alloc exec through the server: %v\n%s", err, out)
	}
	// The client-only agent forwards reads and writes to the server and
	// serves its own allocation's logs.
	out, err = c.CLI(c1, "job", "status", "echo")
	if err != nil || !strings.Contains(out, "running") {
		t.Errorf("job status through the client agent: %v\n%s", err, out)
	}
	out, err = c.CLI(c1, "alloc", "logs", id)
	if err != nil || !strings.Contains(out, "hello-from-c1") {
		t.Errorf("alloc logs on the client agent: %v\n%s (server said %q)", err, out, logs)
	}
	if out, err := c.CLI(c1, "server", "members"); err != nil || !strings.Contains(out, "s1") {
		t.Errorf("server members through the client agent: %v\n%s", err, out)
	}
}
