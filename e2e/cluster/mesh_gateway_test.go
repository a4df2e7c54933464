package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// meshGatewayJobs: in dc1, a mesh gateway (port "mesh"), web (upstream to
// api in dc2 through the local gateway, 9191), web-remote (through dc2's
// gateway, 9192), web-entry (no mode: the config entries', 9193) and
// web-failover (api in dc1, which has none, mode local, 9194); in
// dc2, a mesh gateway (its port left to Nomad's
// default) and api (a TCP echo). Every web task is an echo too, only
// there to exec the client from.
func meshGatewayJobs(gwNetwork string) (dc1, dc2 string) {
	web := func(name, mode string, port int) string {
		dc := "dc2"
		if name == "web-failover" {
			dc = "dc1" // api has none: its resolver fails over to dc2
		}
		gw := ""
		if mode != "" {
			gw = fmt.Sprintf("\n              mesh_gateway {\n                mode = %q\n              }", mode)
		}
		return fmt.Sprintf(`
  group %[1]q {
    network {
      mode = "bridge"
    }
    service {
      name = %[1]q
      port = "8080"
      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "api"
              datacenter       = %[4]q
              local_bind_port  = %[3]d%[2]s
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
`, name, gw, port, dc)
	}
	dc1 = `job "mgw-dc1" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "` + gwNetwork + `"
      port "mesh" {}
    }
    service {
      name = "mesh-gateway"
      port = "mesh"
      connect {
        gateway {
          mesh {}
        }
      }
    }
  }
` + web("web", "local", 9191) + web("web-remote", "remote", 9192) + web("web-entry", "", 9193) + web("web-failover", "local", 9194) + "}\n"
	dc2 = `job "mgw-dc2" {
  datacenters = ["dc2"]

  group "gateway" {
    network {
      mode = "` + gwNetwork + `"
    }
    service {
      name = "mesh-gateway"
      connect {
        gateway {
          mesh {}
        }
      }
    }
  }

  group "api" {
    network {
      mode = "bridge"
    }
    service {
      name = "api"
      port = "9090"
      connect {
        sidecar_service {}
      }
    }
    task "api" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9090"]
      }
    }
  }
}
`
	return dc1, dc2
}

// allocAdmin GETs path from the admin of the first proxy in allocation
// allocID (127.0.0.2:19001 inside its namespace), from inside task.
func (e *meshGatewayEnv) allocAdmin(allocID, task, path string) (string, error) {
	return e.c.execIn(e.s1, allocID, task, e.c.bin, "demo-app", "get", "-timeout", "5s", "http://127.0.0.2:19001"+path)
}

// proxyCounter reads one counter of the proxy in allocation allocID (0
// when it does not exist yet).
func (e *meshGatewayEnv) proxyCounter(t *testing.T, allocID, name string) int {
	t.Helper()
	out, err := e.allocAdmin(allocID, gatewayTask, "/stats?filter="+regexp.QuoteMeta(name))
	if err != nil {
		t.Fatalf("stats of %s: %v: %s", allocID, err, out)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `: (\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// gatewayTask is the injected task of the mesh-gateway service.
const gatewayTask = "connect-mesh-mesh-gateway"

// meshGatewayEnv is the two datacenters' allocations by group.
type meshGatewayEnv struct {
	c                        *cluster
	s1, c1, c2               *agent
	gw1, gw2                 string // gateway allocations
	web, webRemote, webEntry string
	webFailover              string
}

func (e *meshGatewayEnv) call(allocID, task string, port int, msg string) (bool, string) {
	out, err := e.c.CLI(e.s1, "alloc", "exec", "-task", task, allocID, e.c.bin, "demo-app", "tcp-client",
		"-addr", fmt.Sprintf("127.0.0.1:%d", port), "-message", msg, "-timeout", "2s")
	return err == nil && strings.TrimSpace(out) == msg, out
}

// startMeshGatewayEnv runs the two datacenters' jobs, their gateways in
// network mode gwNetwork ("bridge" or "host").
func startMeshGatewayEnv(t *testing.T, gwNetwork string) *meshGatewayEnv {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClientDC("c1", 5, "dc1", s1), c.AddClientDC("c2", 6, "dc2", s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)
	dc1, dc2 := meshGatewayJobs(gwNetwork)
	c.RunJobCLI(s1, "mgw-dc2", dc2)
	c.RunJobCLI(s1, "mgw-dc1", dc1)
	e := &meshGatewayEnv{c: c, s1: s1, c1: c1, c2: c2}
	names := c.nodeNames(s1)
	for job, node := range map[string]string{"mgw-dc1": "c1", "mgw-dc2": "c2"} {
		want := map[string]int{"mgw-dc1": 5, "mgw-dc2": 2}[job]
		allocs, _ := c.WaitRunning(s1, job, want, 120*time.Second)
		for _, al := range allocs {
			if names[al.NodeID] != node {
				t.Errorf("%s/%s placed on %s, want %s (its datacenter's node)", job, al.TaskGroup, names[al.NodeID], node)
			}
			switch job + "/" + al.TaskGroup {
			case "mgw-dc1/gateway":
				e.gw1 = al.ID
			case "mgw-dc2/gateway":
				e.gw2 = al.ID
			case "mgw-dc1/web":
				e.web = al.ID
			case "mgw-dc1/web-remote":
				e.webRemote = al.ID
			case "mgw-dc1/web-entry":
				e.webEntry = al.ID
			case "mgw-dc1/web-failover":
				e.webFailover = al.ID
			}
		}
	}
	return e
}

// catalogGateways checks the Consul-shaped catalog shows both gateways
// with their Kind, datacenter and lan/wan tagged addresses.
func catalogGateways(t *testing.T, host *agent) {
	t.Helper()
	out, err := getOnHost(host, "http://127.0.0.1:8500/v1/catalog/service/mesh-gateway")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var gws []struct {
		ServiceKind            string
		ServiceAddress         string
		ServicePort            int
		ServiceTaggedAddresses map[string]struct {
			Address string
			Port    int
		}
	}
	if err := json.Unmarshal([]byte(out), &gws); err != nil || len(gws) != 2 {
		t.Fatalf("mesh-gateway instances = %s (%v)", out, err)
	}
	for _, g := range gws {
		lan, wan := g.ServiceTaggedAddresses["lan"], g.ServiceTaggedAddresses["wan"]
		if g.ServiceKind != "mesh-gateway" || lan.Port != g.ServicePort || wan.Address != g.ServiceAddress || wan.Port == 0 {
			t.Errorf("mesh gateway in the catalog = %+v", g)
		}
	}
}

// TestMeshGatewaysAcrossDatacenters: two datacenters (node groups of one
// cluster), a mesh gateway in each. web in dc1 reaches api in dc2 through
// its local gateway, then dc2's (mode local); web-remote through dc2's
// gateway alone (mode remote). The mTLS is the sidecars' (web verifies
// dc2's api identity, api's agent judges web's dc1 identity), and a deny
// intention stops the cross-datacenter call.
func TestMeshGatewaysAcrossDatacenters(t *testing.T) {
	e := startMeshGatewayEnv(t, "bridge")
	catalogGateways(t, e.c1)
	if out, err := e.c.CLI(e.s1, "alloc", "status", e.gw1); err != nil || !strings.Contains(out, "Mesh Gateway: mesh-gateway") {
		t.Errorf("alloc status of dc1's gateway: %v\n%s", err, out)
	}
	const (
		remoteDC2 = "tcp.mesh_gateway_remote.dc2.downstream_cx_total"
		localAPI  = "tcp.mesh_gateway_local.api.downstream_cx_total"
	)
	took := poll(t, 90*time.Second, "web reaching api in dc2 through the mesh gateways", func() (bool, string) {
		return e.call(e.web, "web", 9191, "hello dc2")
	})
	figure(t, "first call across the mesh gateways", took)

	// One more call: both gateways count it (mode local).
	before1, before2 := e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
	if ok, out := e.call(e.web, "web", 9191, "through both"); !ok {
		t.Fatalf("web -> api: %s", out)
	}
	if a1, a2 := e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI); a1 != before1+1 || a2 != before2+1 {
		t.Errorf("mode local: dc1 gateway %s %d -> %d, dc2 gateway %s %d -> %d (want +1 each)", remoteDC2, before1, a1, localAPI, before2, a2)
	}

	// Mode remote: only dc2's gateway.
	poll(t, 60*time.Second, "web-remote reaching api through dc2's gateway", func() (bool, string) {
		return e.call(e.webRemote, "web", 9192, "hello remote")
	})
	before1, before2 = e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
	if ok, out := e.call(e.webRemote, "web", 9192, "straight to dc2"); !ok {
		t.Fatalf("web-remote -> api: %s", out)
	}
	if a1, a2 := e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI); a1 != before1 || a2 != before2+1 {
		t.Errorf("mode remote: dc1 gateway %s %d -> %d (want unchanged), dc2 gateway %s %d -> %d (want +1)", remoteDC2, before1, a1, localAPI, before2, a2)
	}

	checkEntryModes(t, e)
	checkCrossDCIdentities(t, e)
	checkFailoverThroughGateways(t, e)

	// A deny intention stops the call at api's sidecar, whose agent (in
	// dc2) saw web's dc1 identity.
	if out, err := e.c.CLIOnHost(e.c1, "intention", "create", "-deny", "web", "api"); err != nil {
		t.Fatalf("intention create: %v\n%s", err, out)
	}
	poll(t, 30*time.Second, "the deny refusing web across datacenters", func() (bool, string) {
		ok, out := e.call(e.web, "web", 9191, "denied?")
		return !ok, out
	})
	denied := regexp.MustCompile(`connection denied.*source=spiffe://[^/ ]+/ns/default/dc/dc1/svc/web\b`)
	poll(t, 10*time.Second, "dc2's agent logging web's dc1 identity as denied", func() (bool, string) {
		log, err := os.ReadFile(e.c2.LogPath)
		return err == nil && denied.Match(log), "no denial of spiffe://.../dc/dc1/svc/web in " + e.c2.LogPath
	})
	if ok, out := e.call(e.webRemote, "web", 9192, "still allowed"); !ok {
		t.Errorf("web-remote (no intention against it) was refused too: %s", out)
	}
	if out, err := e.c.CLIOnHost(e.c1, "intention", "delete", "web", "api"); err != nil {
		t.Fatalf("intention delete: %v\n%s", err, out)
	}
	poll(t, 30*time.Second, "web reaching api again", func() (bool, string) {
		return e.call(e.web, "web", 9191, "allowed again")
	})
}

// checkCrossDCIdentities: web's sidecar verifies api's dc2 identity (its
// cluster's SAN matcher, in the config the sidecar runs), and each
// datacenter's agent issues its services their datacenter's identity.
func checkCrossDCIdentities(t *testing.T, e *meshGatewayEnv) {
	t.Helper()
	dump, err := e.allocAdmin(e.web, "web", "/config_dump")
	if err != nil {
		t.Fatalf("web's config_dump: %v: %s", err, dump)
	}
	if !regexp.MustCompile(`spiffe://[^/"]+/ns/default/dc/dc2/svc/api"`).MatchString(dump) {
		t.Errorf("web's sidecar does not verify api's dc2 identity:\n%s", dump)
	}
	for host, want := range map[*agent]string{e.c1: "/dc/dc1/svc/web", e.c2: "/dc/dc2/svc/api"} {
		svc := want[strings.LastIndex(want, "/")+1:]
		out, err := getOnHost(host, "http://127.0.0.1:8500/v1/agent/connect/ca/leaf/"+svc)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var leaf struct{ ServiceURI string }
		if err := json.Unmarshal([]byte(out), &leaf); err != nil || !strings.HasSuffix(leaf.ServiceURI, want) {
			t.Errorf("%s's leaf of %s: URI %q (want …%s), %v", host.Name, svc, leaf.ServiceURI, want, err)
		}
	}
}

// checkEntryModes: web-entry's upstream names no mode, so proxy-defaults'
// MeshGateway decides (local: both gateways), until web-entry's
// service-defaults says remote (it wins over proxy-defaults).
func checkEntryModes(t *testing.T, e *meshGatewayEnv) {
	t.Helper()
	const remoteDC2, localAPI = "tcp.mesh_gateway_remote.dc2.downstream_cx_total", "tcp.mesh_gateway_local.api.downstream_cx_total"
	write := func(name, body string) {
		path := filepath.Join(e.c.certDir, name+".hcl")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := e.c.CLIOnHost(e.s1, "config", "write", path); err != nil {
			t.Fatalf("config write %s: %v\n%s", name, err, out)
		}
	}
	// Through both gateways or dc2's alone: counted at dc1's (want1) and dc2's.
	through := func(what string, want1 int) {
		t.Helper()
		var b1, b2, a1, a2 int
		poll(t, 30*time.Second, what, func() (bool, string) {
			b1, b2 = e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
			ok, out := e.call(e.webEntry, "web", 9193, "entry")
			a1, a2 = e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
			return ok && a1 == b1+want1 && a2 == b2+1, fmt.Sprintf("%s; dc1 gateway %d -> %d, dc2 gateway %d -> %d", out, b1, a1, b2, a2)
		})
	}
	write("proxy-defaults", "Kind = \"proxy-defaults\"\nName = \"global\"\nMeshGateway {\n  Mode = \"local\"\n}\n")
	through("web-entry through both gateways (proxy-defaults: local)", 1)
	write("web-entry-defaults", "Kind = \"service-defaults\"\nName = \"web-entry\"\nMeshGateway {\n  Mode = \"remote\"\n}\n")
	through("web-entry through dc2's gateway alone (service-defaults: remote)", 0)
}

// TestMeshGatewaysHostNetwork: the same two datacenters with both mesh
// gateways in host network mode (each in its node's namespace, registered
// at the node's address): web reaches api in dc2 through both gateways
// (mode local) and through dc2's alone (mode remote); the sidecars'
// endpoints for api are the gateways, so no call passes without them.
func TestMeshGatewaysHostNetwork(t *testing.T) {
	e := startMeshGatewayEnv(t, "host")
	catalogGateways(t, e.c1)
	out, err := getOnHost(e.c1, "http://127.0.0.1:8500/v1/catalog/service/mesh-gateway")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var gws []struct{ ServiceAddress string }
	if err := json.Unmarshal([]byte(out), &gws); err != nil {
		t.Fatalf("mesh-gateway instances = %s (%v)", out, err)
	}
	got := map[string]bool{}
	for _, g := range gws {
		got[g.ServiceAddress] = true
	}
	for _, n := range []*agent{e.c1, e.c2} {
		if !got[n.IP] {
			t.Errorf("no host-mode mesh gateway registered at node %s's address %s: %s", n.Name, n.IP, out)
		}
	}
	poll(t, 90*time.Second, "web reaching api in dc2 through host-mode gateways (mode local)", func() (bool, string) {
		return e.call(e.web, "web", 9191, "hello host dc2")
	})
	poll(t, 60*time.Second, "web-remote reaching api through dc2's host-mode gateway", func() (bool, string) {
		return e.call(e.webRemote, "web", 9192, "hello host remote")
	})
}
