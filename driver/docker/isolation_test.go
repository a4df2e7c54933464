package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/coreos/go-iptables/iptables"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/vishvananda/netlink"

	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// The CNI suite's isolation tests (cni/net_test.go), with the
// allocations' processes as docker containers: the driver joins each
// task to the namespace meshlet's CNI manager made, through the pause
// container.

// cniPlugins is a directory with the standard CNI plugins: the
// repository's bin/cni (make all), else they are built for the test.
func cniPlugins(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MESHLET_CNI_PATH"); p != "" {
		return p
	}
	if _, err := os.Stat("../../bin/cni/bridge"); err == nil {
		p, _ := filepath.Abs("../../bin/cni")
		return p
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	for _, p := range []string{"ipam/host-local", "main/bridge", "main/loopback", "meta/firewall", "meta/portmap"} {
		args = append(args, "github.com/containernetworking/plugins/plugins/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as `make cni` builds them
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("failed to build CNI plugins: %v\n%s", err, out)
	}
	return dir
}

// cniNet is a test's own CNI network: bridge, subnet, chains and state,
// all removed at cleanup.
type cniNet struct {
	t      *testing.T
	cfg    cni.Config
	m      *cni.Manager
	prefix string
}

func newCNINet(t *testing.T) *cniNet {
	t.Helper()
	testutil.RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	n := int(b[0])
	cn := &cniNet{t: t, prefix: fmt.Sprintf("10.252.%d.", n)}
	cn.cfg = cni.Config{PluginDir: cniPlugins(t), ConfigDir: t.TempDir(), BridgeName: "mdb" + suffix,
		Subnet: fmt.Sprintf("10.252.%d.0/24", n), NetworkName: "mdock-" + suffix,
		StateDir: t.TempDir(), AdminChain: "MD-ADMIN-" + suffix}
	m, err := cni.New(cn.cfg, hclog.New(&hclog.LoggerOptions{Name: "cni", Level: hclog.Warn, Output: os.Stderr}))
	if err != nil {
		t.Fatal(err)
	}
	cn.m = m
	t.Cleanup(cn.cleanup)
	return cn
}

// alloc sets up a bridge allocation's network, torn down at cleanup.
func (cn *cniNet) alloc(ports ...structs.PortMapping) (*structs.Allocation, string) {
	cn.t.Helper()
	tg := &structs.TaskGroup{Name: "g", Networks: []*structs.NetworkResource{{Mode: "bridge"}}}
	a := &structs.Allocation{ID: uuid.NewString(), Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		Job:                &structs.Job{ID: "web", Region: "global", TaskGroups: []*structs.TaskGroup{tg}},
		AllocatedResources: &structs.AllocatedResources{Shared: structs.AllocatedSharedResources{Ports: ports}}}
	st, err := cn.m.Setup(cn.t.Context(), a)
	if err != nil {
		cn.t.Fatalf("Setup: %v", err)
	}
	cn.t.Cleanup(func() { _ = cn.m.Teardown(context.Background(), a) })
	if !strings.HasPrefix(st.Address, cn.prefix) {
		cn.t.Fatalf("address %s outside %s", st.Address, cn.cfg.Subnet)
	}
	return a, st.Address
}

func (cn *cniNet) cleanup() {
	if l, err := netlink.LinkByName(cn.cfg.BridgeName); err == nil {
		_ = netlink.LinkDel(l)
	}
	if ipt, err := iptables.New(); err == nil {
		adminRule := []string{"-m", "comment", "--comment", "CNI firewall plugin admin overrides", "-j", cn.cfg.AdminChain}
		for range 10 {
			if ok, err := ipt.Exists("filter", "CNI-FORWARD", adminRule...); err != nil || !ok {
				break
			}
			_ = ipt.Delete("filter", "CNI-FORWARD", adminRule...)
		}
		_ = ipt.ClearAndDeleteChain("filter", cn.cfg.AdminChain)
	}
	if err := cni.RemoveBridgeNAT(cn.cfg.BridgeName); err != nil {
		cn.t.Errorf("RemoveBridgeNAT: %v", err)
	}
}

// residue lists what is left of an allocation: its namespace file, veths
// on the bridge, IPAM leases, iptables lines naming it or its address,
// containers labelled with it.
func (cn *cniNet) residue(allocID, addr string) []string {
	var out []string
	if _, err := os.Stat(cn.m.NetNSPath(allocID)); err == nil {
		out = append(out, "namespace "+allocID)
	}
	if br, err := netlink.LinkByName(cn.cfg.BridgeName); err == nil {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Type() == "veth" && l.Attrs().MasterIndex == br.Attrs().Index {
				out = append(out, "veth "+l.Attrs().Name)
			}
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(cn.cfg.StateDir, "ipam", cn.cfg.NetworkName)); len(entries) > 0 {
		for _, e := range entries {
			if e.Name() != "lock" && !strings.HasPrefix(e.Name(), "last_reserved_ip") {
				out = append(out, "lease "+e.Name())
			}
		}
	}
	for _, table := range []string{"nat", "filter"} {
		dump, err := exec.Command("iptables", "-w", "10", "-t", table, "-S").Output()
		if err != nil {
			cn.t.Fatalf("iptables -S: %v", err)
		}
		for _, line := range strings.Split(string(dump), "\n") {
			if strings.Contains(line, allocID) || strings.Contains(line, addr+"/") || strings.Contains(line, addr+" ") {
				out = append(out, table+": "+line)
			}
		}
	}
	list, err := daemon.Client(cn.t).ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelAllocID+"="+allocID))})
	if err != nil {
		cn.t.Fatal(err)
	}
	for _, c := range list {
		out = append(out, "container "+strings.Join(c.Names, ","))
	}
	return out
}

// bridgeTask is a busybox task of alloc joining its namespace, serving
// body over HTTP on listen (when set) and then running script.
func bridgeTask(t *testing.T, a *structs.Allocation, nsPath, name, listen, body, script string) *driver.TaskConfig {
	t.Helper()
	if listen != "" {
		script = fmt.Sprintf("httpd -p %s -h /local && %s", listen, script)
	}
	cfg := taskConfig(t, name, "sh", "-c", script)
	delete(cfg.Config, "network_mode")
	cfg.AllocID, cfg.NetNSPath = a.ID, nsPath
	if err := os.WriteFile(filepath.Join(cfg.TaskDir, "local", "index.html"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// dialIn connects to addr from inside nsPath ("" = host) and returns what
// the server sent, within timeout.
func dialIn(nsPath, addr string, timeout time.Duration) (string, error) {
	var c net.Conn
	dial := func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	}
	var err error
	if nsPath == "" {
		err = dial(nil)
	} else {
		err = ns.WithNetNSPath(nsPath, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// (busybox's wget -T crashes; its timeout applet bounds the probes.)

// A container's loopback listener is reachable by the other containers
// of its allocation and by nobody else: not another allocation's
// containers (on their own loopback or on the first allocation's address),
// not the host. A container cannot bind another allocation's address.
func TestContainerLoopbackIsolation(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cn := newCNINet(t)
	a, addrA := cn.alloc()
	b, _ := cn.alloc()
	nsA, nsB := cn.m.NetNSPath(a.ID), cn.m.NetNSPath(b.ID)
	server := bridgeTask(t, a, nsA, "server", "127.0.0.1:8080", "secret-of-A", "sleep 300")
	drivertest.Start(t, d, server)
	testutil.WaitFor(t, 10*time.Second, "A's server", func() bool {
		got, _ := dialIn(nsA, "127.0.0.1:8080", time.Second)
		return strings.Contains(got, "secret-of-A")
	})
	// Positive control: a second container of A reaches it.
	peer := bridgeTask(t, a, nsA, "peer", "", "", "busybox timeout 5 wget -qO- http://127.0.0.1:8080/")
	if out := runScript(t, d, peer); !strings.Contains(out, "secret-of-A") {
		t.Fatalf("A's second container read %q (stderr %q), want A's server", out, drivertest.Log(t, peer, "stderr"))
	}
	probe := fmt.Sprintf("for u in http://127.0.0.1:8080/ http://%s:8080/; do busybox timeout 2 wget -qO- $u && echo REACHED $u; done; "+
		"httpd -p %s:9090 -h /local 2>&1; echo bind-exit=$?", addrA, addrA)
	other := bridgeTask(t, b, nsB, "other", "", "", probe)
	drivertest.Start(t, d, other)
	drivertest.Wait(t, d, other.ID)
	out := drivertest.Log(t, other, "stdout")
	if strings.Contains(out, "REACHED") || strings.Contains(out, "secret-of-A") {
		t.Errorf("B's container reached A's loopback listener:\n%s", out)
	}
	if !strings.Contains(out, "bind-exit=1") || !strings.Contains(out, "ssign requested address") {
		t.Errorf("B's container bound A's address %s:\n%s", addrA, out)
	}
	if got, err := dialIn("", net.JoinHostPort(addrA, "8080"), time.Second); err == nil {
		t.Errorf("host reached A's loopback listener at %s: %q", addrA, got)
	}
}

// A host port maps to a container's listener through the host's
// 127.0.0.1; stopping the tasks and tearing the network down leaves no
// container, veth, iptables rule, lease or namespace behind, and the port
// stops answering.
func TestContainerHostPortAndTeardown(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cn := newCNINet(t)
	port := testutil.FreePort(t)
	a, addr := cn.alloc(structs.PortMapping{Label: "http", Value: port, To: 8080})
	nsA := cn.m.NetNSPath(a.ID)
	web := bridgeTask(t, a, nsA, "web", "0.0.0.0:8080", "mapped-container", "sleep 300")
	drivertest.Start(t, d, web)
	hostAddr := fmt.Sprintf("127.0.0.1:%d", port)
	testutil.WaitFor(t, 10*time.Second, "the host port", func() bool {
		got, _ := dialIn("", hostAddr, time.Second)
		return strings.Contains(got, "mapped-container")
	})
	if err := d.StopTask(web.ID, 5*time.Second, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if err := d.DestroyTask(web.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := cn.m.Teardown(t.Context(), a); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got, err := dialIn("", hostAddr, time.Second); err == nil {
		t.Errorf("host port answers after teardown: %q", got)
	}
	if r := cn.residue(a.ID, addr); len(r) > 0 {
		t.Errorf("left behind:\n  %s", strings.Join(r, "\n  "))
	}
}
