package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/meshlet/meshlet/internal/subnet"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testNet is the hosts' network: a bridge in the root namespace with
// 10.x.y.1/24, and per host a namespace whose eth0 (10.x.y.N/24) is a veth
// on the bridge. Its teardown, registered before anything is made, kills
// every process left in the namespaces and removes all of it.
type testNet struct {
	t      *testing.T
	Bridge string
	Prefix string // "10.x.y": host N is Prefix.N
	subnet string

	mu         sync.Mutex
	namespaces []string
	veths      []string
}

// newTestNet creates the bridge on a free 10.2xx.yyy.0/24.
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	n := &testNet{t: t, Bridge: "mlc" + hex.EncodeToString(suffix)}
	n.subnet = freeSubnet(t)
	n.Prefix = strings.TrimSuffix(n.subnet, ".0/24")
	t.Cleanup(n.teardown)
	n.must("ip", "link", "add", n.Bridge, "type", "bridge")
	n.must("ip", "addr", "add", n.Prefix+".1/24", "dev", n.Bridge)
	n.must("ip", "link", "set", n.Bridge, "up")
	return n
}

// Addr is host n's address.
func (n *testNet) Addr(host int) string { return fmt.Sprintf("%s.%d", n.Prefix, host) }

// AddHost creates the namespace of host number host (2-254) and returns
// its name.
func (n *testNet) AddHost(name string, host int) string {
	n.t.Helper()
	ns := n.Bridge + "-" + name
	veth := fmt.Sprintf("%sv%d", n.Bridge, host)
	n.mu.Lock()
	n.namespaces = append(n.namespaces, ns)
	n.veths = append(n.veths, veth)
	n.mu.Unlock()
	n.must("ip", "netns", "add", ns)
	n.must("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	n.must("ip", "link", "set", veth, "master", n.Bridge, "up")
	n.must("ip", "-n", ns, "addr", "add", n.Addr(host)+"/24", "dev", "eth0")
	n.must("ip", "-n", ns, "link", "set", "eth0", "up")
	n.must("ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

func (n *testNet) must(args ...string) {
	n.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// teardown kills what still runs in the namespaces (tasks that left the
// agents' process groups), then deletes namespaces, veths and bridge.
func (n *testNet) teardown() {
	n.mu.Lock()
	namespaces, veths := n.namespaces, n.veths
	n.mu.Unlock()
	for _, ns := range namespaces {
		if left := killNamespace(ns); len(left) > 0 {
			n.t.Errorf("processes %v still in namespace %s 10s after SIGKILL", left, ns)
		}
		n.quiet("ip", "netns", "del", ns)
	}
	for _, v := range veths {
		n.quiet("ip", "link", "del", v)
	}
	n.quiet("ip", "link", "del", n.Bridge)
}

// quiet runs a removal, logging failures other than "already gone".
func (n *testNet) quiet(args ...string) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Cannot find device") && !strings.Contains(string(out), "No such device") &&
		!strings.Contains(string(out), "No such file") {
		n.t.Errorf("cleanup: %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// nsPIDs lists the processes in namespace ns.
func nsPIDs(ns string) []int {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killNamespace SIGKILLs every process in ns until none is left (10s at
// most) and returns those that stayed.
func killNamespace(ns string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := nsPIDs(ns)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeSubnet reserves a free test subnet until t ends (package subnet).
func freeSubnet(t *testing.T) string {
	t.Helper()
	cidr, release, err := subnet.Pick()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return cidr
}
