package agent

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/vishvananda/netlink"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// serveTestApp is the task the bridge test runs (the test binary re-exec'd
// as "test-serve ADDR"): every connection gets one line naming the
// allocation and its address as the task's environment tells them.
func serveTestApp(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening on", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		fmt.Fprintf(c, "alloc=%s ip=%s\n", os.Getenv("NOMAD_ALLOC_ID"), os.Getenv("NOMAD_ALLOC_IP_http"))
		_ = c.Close()
	}
}

func cniPath(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MESHLET_CNI_PATH")
	if dir == "" {
		abs, err := filepath.Abs(filepath.Join("..", "bin", "cni"))
		if err != nil {
			t.Fatal(err)
		}
		dir = abs
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "firewall", "portmap"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Skipf("CNI plugin %s not found in %s: run `make cni` or set MESHLET_CNI_PATH", p, dir)
		}
	}
	return dir
}

// bridgeAgent starts an agent with its own bridge and subnet so the test
// never collides with another agent or test on the host.
func bridgeAgent(t *testing.T, dataDir, bridge, subnet, cni string) *Agent {
	t.Helper()
	cfg := DevConfig()
	cfg.DataDir, cfg.Ports, cfg.NodeName = dataDir, Ports{}, "test-node"
	cfg.Client.CNIPath = cni
	cfg.Client.BridgeNetworkName = bridge
	cfg.Client.BridgeNetworkSubnet = subnet
	a, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	return a
}

func dialLine(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

func TestBridgeNetworkingSurvivesAgentRestart(t *testing.T) {
	testutil.RequireRoot(t)
	cni := cniPath(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bridge := "mt" + uuid.NewString()[:8]
	subnet := fmt.Sprintf("10.97.%d.0/24", rand.IntN(250)+1)
	cleanupBridge(t, bridge)
	dir := t.TempDir()
	a := bridgeAgent(t, dir, bridge, subnet, cni)
	cleanupJob(t, &a, "bridged")
	src := fmt.Sprintf(`
job "bridged" {
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = %q
        args    = ["test-serve", "0.0.0.0:${NOMAD_PORT_http}"]
      }
    }
  }
}`, exe)
	if _, err := a.Backend().RegisterJob(context.Background(), parseJob(t, src), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "bridged", structs.AllocClientStatusRunning)
	if alloc.NetworkStatus == nil || alloc.NetworkStatus.InterfaceName != "eth0" || !strings.HasPrefix(alloc.NetworkStatus.Address, strings.TrimSuffix(subnet, "0/24")) {
		t.Fatalf("network status = %+v (subnet %s)", alloc.NetworkStatus, subnet)
	}
	ports := alloc.AllocatedResources.Shared.Ports
	if len(ports) != 1 || ports[0].To != 8080 || ports[0].Value < 20000 {
		t.Fatalf("ports = %+v", ports)
	}
	hostAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[0].Value))
	want := fmt.Sprintf("alloc=%s ip=%s\n", alloc.ID, alloc.NetworkStatus.Address)
	testutil.WaitFor(t, hang, "task answering on "+hostAddr, func() bool {
		line, err := dialLine(hostAddr)
		return err == nil && line == want
	})
	nsPath := filepath.Join("/var/run/netns", alloc.ID)
	if _, err := os.Stat(nsPath); err != nil {
		t.Fatalf("namespace not at %s: %v", nsPath, err)
	}

	// Agent restart: the namespace is restored (same address), the task
	// keeps answering.
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if line, err := dialLine(hostAddr); err != nil || line != want {
		t.Fatalf("task unreachable while the agent is down: %q %v", line, err)
	}
	a = bridgeAgent(t, dir, bridge, subnet, cni)
	testutil.WaitFor(t, hang, "restored allocation running", func() bool {
		got := onlyAlloc(t, a.Backend(), "bridged")
		return got.ClientStatus == structs.AllocClientStatusRunning && got.NetworkStatus != nil
	})
	if got := onlyAlloc(t, a.Backend(), "bridged"); got.NetworkStatus == nil {
		// Seen once under load: a later client update dropped it.
		t.Fatalf("restored allocation lost its network status after reporting it: %+v", got)
	} else if got.NetworkStatus.Address != alloc.NetworkStatus.Address {
		t.Fatalf("address changed across restart: %s → %s", alloc.NetworkStatus.Address, got.NetworkStatus.Address)
	}
	if line, err := dialLine(hostAddr); err != nil || line != want {
		t.Fatalf("after restart: %q %v", line, err)
	}
	// Exec reaches the recovered task, inside its namespace.
	var out strings.Builder
	testutil.WaitFor(t, hang, "exec in the recovered task", func() bool {
		out.Reset()
		code, err := a.Backend().ExecTask(context.Background(), api.ExecRequest{AllocID: alloc.ID,
			Cmd: []string{"/bin/sh", "-c", "cat /proc/net/dev"}, Stdout: &out})
		return err == nil && code == 0
	})
	if !strings.Contains(out.String(), "eth0") || strings.Contains(out.String(), "ifb0") {
		t.Fatalf("exec does not run in the allocation namespace: %q", out.String())
	}
	pid := servePID(t, alloc.ID)

	// Stop: the task dies and the namespace goes.
	stopJob(t, a.Backend(), "bridged", false)
	waitAllocStatus(t, a.Backend(), "bridged", structs.AllocClientStatusComplete)
	testutil.WaitFor(t, hang, "namespace removed", func() bool {
		_, err := os.Stat(nsPath)
		return os.IsNotExist(err)
	})
	testutil.WaitFor(t, hang, "task process gone", func() bool { return !alive(pid) })
}

// servePID finds the test-serve process of an allocation by its env.
func servePID(t *testing.T, allocID string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(env), "NOMAD_ALLOC_ID="+allocID+"\x00") && alive(pid) {
			return pid
		}
	}
	t.Fatalf("no process of allocation %s", allocID)
	return 0
}

func TestBridgeWithoutPluginsFailsWithActionableError(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bridge := "mt" + uuid.NewString()[:8]
	cleanupBridge(t, bridge)
	a := bridgeAgent(t, dir, bridge, fmt.Sprintf("10.97.%d.0/24", rand.IntN(250)+1), t.TempDir())
	cleanupJob(t, &a, "noplugins")
	src := `
job "noplugins" {
  group "g" {
    network { mode = "bridge" }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}`
	if _, err := a.Backend().RegisterJob(context.Background(), parseJob(t, src), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "noplugins", structs.AllocClientStatusFailed)
	ev := alloc.TaskStates["t"].Events[len(alloc.TaskStates["t"].Events)-1]
	if ev.Type != structs.TaskSetupFailure || !strings.Contains(ev.DisplayMessage, "not found in") {
		t.Fatalf("last event = %+v; description %q", ev, alloc.ClientDescription)
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", alloc.ID)); !os.IsNotExist(err) {
		t.Fatalf("failed allocation left its namespace: %v", err)
	}
}

// cleanupBridge removes, when the test ends, the bridge a test agent
// creates and the masquerade rules it keeps for it (by design, agents
// leave both behind).
func cleanupBridge(t *testing.T, bridge string) {
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
		if os.Geteuid() != 0 {
			return // no bridge network without root, so no rules either
		}
		if err := cni.RemoveBridgeNAT(bridge); err != nil {
			t.Errorf("failed to remove the masquerade rules of %s: %v", bridge, err)
		}
	})
}
