package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/netnsdial"
)

// terminatingJob: an echo server with no sidecar and a terminating gateway
// on gwNode, web (an echo app with upstreams to legacy-db on 9191 and
// legacy-cache, which the job's gateway block does not link, on 9192) on
// webNode.
func terminatingJob(gwNode, webNode string) string {
	pin := func(node string) string {
		return fmt.Sprintf("constraint {\n      attribute = \"${node.unique.name}\"\n      value     = %q\n    }", node)
	}
	return fmt.Sprintf(`job "tgw-mesh" {
  datacenters = ["dc1"]

  group "legacy" {
    %[1]s
    network {
      mode = "bridge"
    }
    task "echo" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "0.0.0.0:9090"]
      }
    }
  }

  group "gateway" {
    %[1]s
    network {
      mode = "bridge"
    }
    service {
      name = "tgw"
      connect {
        gateway {
          terminating {
            service {
              name = "legacy-db"
            }
          }
        }
      }
    }
  }

  group "web" {
    %[2]s
    network {
      mode = "bridge"
    }
    service {
      name = "web"
      port = "8080"
      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "legacy-db"
              local_bind_port  = 9191
            }
            upstreams {
              destination_name = "legacy-cache"
              local_bind_port  = 9192
            }
          }
        }
      }
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:8080"]
      }
    }
  }
}
`, pin(gwNode), pin(webNode))
}

// putOnHost sends PUT path with body to host's connect API (127.0.0.1:8500
// inside its host namespace), with the cluster's token.
func putOnHost(t *testing.T, host *agent, path string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	d := netnsdial.New(filepath.Join("/var/run/netns", host.NS))
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, "http://127.0.0.1:8500"+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Consul-Token", host.token)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("PUT %s on %s: %v", path, host.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		t.Fatalf("PUT %s on %s: %d %s", path, host.Name, resp.StatusCode, out.String())
	}
}

// TestCrossNodeTerminatingGateway: a service outside the mesh, registered
// through a client agent's /v1/catalog/register (forwarded to the
// servers), reached from web on another node through a terminating
// gateway; a deny intention made through that client refuses it.
func TestCrossNodeTerminatingGateway(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)
	c.RunJobCLI(s1, "tgw-mesh", terminatingJob("c2", "c1"))
	allocs, _ := c.WaitRunning(s1, "tgw-mesh", 3, 90*time.Second)
	var webID, legacyID string
	for _, al := range allocs {
		switch al.TaskGroup {
		case "web":
			webID = al.ID
		case "legacy":
			legacyID = al.ID
		}
	}
	legacy, _, err := s1.API().Allocations().Info(legacyID, nil)
	if err != nil || legacy.NetworkStatus == nil || legacy.NetworkStatus.Address == "" {
		t.Fatalf("legacy allocation's bridge address: %+v, %v", legacy, err)
	}
	putOnHost(t, c1, "/v1/catalog/register", map[string]any{"Node": "legacy-host", "Address": legacy.NetworkStatus.Address,
		"Service": map[string]any{"ID": "legacy-db-1", "Service": "legacy-db", "Port": 9090}})
	echoOn := func(port int) func() (bool, string) {
		return func() (bool, string) {
			out, err := c.CLI(s1, "alloc", "exec", "-task", "web", webID, c.bin, "demo-app", "tcp-client",
				"-addr", fmt.Sprintf("127.0.0.1:%d", port), "-message", "hello legacy", "-timeout", "2s")
			return err == nil && strings.TrimSpace(out) == "hello legacy", out
		}
	}
	echo := echoOn(9191)
	took := poll(t, 60*time.Second, "web reaching legacy-db through the gateway on c2", echo)
	figure(t, "first echo through the terminating gateway", took)

	if out, err := c.CLIOnHost(c1, "intention", "create", "-deny", "web", "legacy-db"); err != nil {
		t.Fatalf("intention create through c1: %v\n%s", err, out)
	}
	poll(t, 10*time.Second, "the deny refusing web", func() (bool, string) { ok, out := echo(); return !ok, out })
	if out, err := c.CLIOnHost(c1, "intention", "delete", "web", "legacy-db"); err != nil {
		t.Fatalf("intention delete through c1: %v\n%s", err, out)
	}
	poll(t, 10*time.Second, "web reaching legacy-db again", echo)
	putOnHost(t, c1, "/v1/catalog/deregister", map[string]any{"Node": "legacy-host", "ServiceID": "legacy-db-1"})
	poll(t, 10*time.Second, "no endpoint once deregistered", func() (bool, string) { ok, out := echo(); return !ok, out })

	// A service linked only by the gateway's config entry (`config
	// write`, not the job): c2 runs no server, so a server must sign its
	// leaf for c2 because c2 runs the gateway the entry names.
	putOnHost(t, c1, "/v1/catalog/register", map[string]any{"Node": "legacy-host", "Address": legacy.NetworkStatus.Address,
		"Service": map[string]any{"ID": "legacy-cache-1", "Service": "legacy-cache", "Port": 9090}})
	putOnHost(t, c1, "/v1/config", map[string]any{"Kind": "terminating-gateway", "Name": "tgw",
		"Services": []map[string]any{{"Name": "legacy-db"}, {"Name": "legacy-cache"}}})
	poll(t, 60*time.Second, "web reaching legacy-cache, linked by config entry only, through the gateway on c2", echoOn(9192))
}
