package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echoMeshJob: a TCP echo service on node bNode, and on node aNode an
// idle client allocation whose sidecar has an upstream to it on
// 127.0.0.1:9191 (a plain TCP upstream).
func echoMeshJob(aNode, bNode string) string {
	return fmt.Sprintf(`job "echo-mesh" {
  datacenters = ["dc1"]

  group "echo" {
    constraint {
      attribute = "${node.unique.name}"
      value     = %q
    }
    network {
      mode = "bridge"
    }
    service {
      name = "echo-b"
      port = "9191"
      connect {
        sidecar_service {}
      }
    }
    task "echo" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9191"]
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }

  group "client" {
    constraint {
      attribute = "${node.unique.name}"
      value     = %q
    }
    network {
      mode = "bridge"
    }
    service {
      name = "echo-a"
      port = "9999"
      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "echo-b"
              local_bind_port  = 9191
            }
          }
        }
      }
    }
    task "idle" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`, bNode, aNode)
}

// TestDenyClosesOpenConnectionAcrossNodes: a TCP connection open through
// the mesh from one node to another is cut within 1 s of a deny
// intention (made through the client agent of the calling node), not
// only new connections refused.
func TestDenyClosesOpenConnectionAcrossNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)
	c.RunJobCLI(s1, "echo-mesh", echoMeshJob("c1", "c2"))
	allocs, _ := c.WaitRunning(s1, "echo-mesh", 2, 90*time.Second)
	var clientID string
	for _, al := range allocs {
		if al.TaskGroup == "client" {
			clientID = al.ID
		}
	}
	exec := func(args ...string) (string, error) {
		return c.CLI(s1, append([]string{"alloc", "exec", "-task", "idle", clientID, c.bin, "demo-app", "tcp-client",
			"-addr", "127.0.0.1:9191"}, args...)...)
	}
	poll(t, 60*time.Second, "an echo through the mesh across nodes", func() (bool, string) {
		out, err := exec("-timeout", "1s")
		return err == nil && strings.Contains(out, "hello world"), out
	})

	type result struct {
		out string
		err error
	}
	held := make(chan result, 1)
	go func() {
		out, err := exec("-hold", "10s", "-every", "50ms", "-timeout", "2s")
		held <- result{out, err}
	}()
	time.Sleep(2 * time.Second)
	asked := time.Now().UnixMilli()
	if out, err := c.CLIOnHost(c1, "intention", "create", "-deny", "echo-a", "echo-b"); err != nil {
		t.Fatalf("intention create through c1: %v\n%s", err, out)
	}
	denied := time.Now().UnixMilli()
	var r result
	select {
	case r = <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the held connection's client did not end")
	}
	if r.err != nil {
		t.Fatalf("held connection: %v\n%q", r.err, r.out)
	}
	oks, closedAt, reason := 0, int64(0), ""
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		f := strings.SplitN(line, " ", 3)
		ms, _ := strconv.ParseInt(f[0], 10, 64)
		switch {
		case len(f) >= 2 && f[1] == "ok" && ms < denied:
			oks++
		case len(f) >= 2 && f[1] == "closed":
			closedAt = ms
			if len(f) == 3 {
				reason = f[2]
			}
		}
	}
	if oks < 10 {
		t.Fatalf("only %d exchanges on the connection before the deny:\n%s", oks, r.out)
	}
	if closedAt == 0 {
		t.Fatalf("the open connection survived the deny intention for its whole 10 s:\n%s", lastLines(r.out, 5))
	}
	if closedAt < asked {
		t.Fatalf("the connection closed %d ms before the deny was asked for (%s): not the deny's doing", asked-closedAt, reason)
	}
	took := time.Duration(closedAt-denied) * time.Millisecond
	figure(t, "deny intention to an open cross-node connection cut", took)
	t.Logf("cut %s after the deny: %s", took, reason)
	if took > time.Second {
		t.Errorf("the open connection was cut %s after the deny, want within 1 s", took)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
