package bench

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/meshlet/meshlet/internal/netnsdial"
	"github.com/meshlet/meshlet/internal/subnet"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The Cluster mesh area's hosts' network: a bridge in the root namespace
// with <prefix>.1/24 on a free 10.2xx.yyy.0/24, and per host a network
// namespace whose eth0 (<prefix>.N/24) is a veth on the bridge (the shape
// of e2e/cluster's harness). Everything it makes is listed and removed by
// teardown, which first kills what still runs in the namespaces.

// meshNet is the bench-created bridge and host namespaces.
type meshNet struct {
	Bridge  string
	Prefix  string // "10.x.y": host N is Prefix.N
	release func() // the subnet reservation, released by teardown

	mu       sync.Mutex
	netnses  []string // namespaces made with ip netns add
	attached []string // allocation namespaces attached by name (unmounted only)
	veths    []string
}

// newMeshNet picks a free subnet and creates the bridge.
func newMeshNet() (*meshNet, error) {
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("failed to name the bridge: %w", err)
	}
	n := &meshNet{Bridge: "mlbm" + hex.EncodeToString(suffix)}
	cidr, release, err := subnet.Pick()
	if err != nil {
		return nil, err
	}
	n.release = release
	n.Prefix = strings.TrimSuffix(cidr, ".0/24")
	for _, args := range [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", n.Prefix + ".1/24", "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			n.teardown()
			return nil, err
		}
	}
	return n, nil
}

// Addr is host number host's address.
func (n *meshNet) Addr(host int) string { return fmt.Sprintf("%s.%d", n.Prefix, host) }

// NetnsPath is the bind mount of a namespace made or attached by name.
func NetnsPath(name string) string { return filepath.Join(NetnsDir, name) }

// AddHost creates namespace <bridge>-<name> with host number host's
// address on eth0 and returns the namespace's name.
func (n *meshNet) AddHost(name string, host int) (string, error) {
	ns := n.Bridge + "-" + name
	veth := fmt.Sprintf("%sv%d", n.Bridge, host)
	n.mu.Lock()
	n.netnses = append(n.netnses, ns)
	n.veths = append(n.veths, veth)
	n.mu.Unlock()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", veth, "master", n.Bridge, "up"},
		{"-n", ns, "addr", "add", n.Addr(host) + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// AttachAlloc names the network namespace of allocation allocID (found
// through one of its processes, which runs outside hostNS) so that `ip
// netns exec` reaches it from the root mount namespace: the agents run in
// their own mount namespaces, where they bind-mount allocation namespaces.
func (n *meshNet) AttachAlloc(allocID, hostNS string) (string, error) {
	pid, err := allocPID(allocID, NetnsPath(hostNS))
	if err != nil {
		return "", err
	}
	name := n.Bridge + "-a" + allocID[:8]
	n.mu.Lock()
	n.attached = append(n.attached, name)
	n.mu.Unlock()
	if err := ipCmd("netns", "attach", name, strconv.Itoa(pid)); err != nil {
		return "", err
	}
	return name, nil
}

// teardown kills every process left in the host namespaces, then removes
// attached names, namespaces, veths, the bridge and the reservation.
func (n *meshNet) teardown() {
	n.mu.Lock()
	netnses, attached, veths := n.netnses, n.attached, n.veths
	n.mu.Unlock()
	for _, ns := range attached {
		_ = ipCmd("netns", "del", ns)
	}
	for _, ns := range netnses {
		killNetns(ns)
		_ = ipCmd("netns", "del", ns)
	}
	for _, v := range veths {
		_ = ipCmd("link", "del", v)
	}
	_ = ipCmd("link", "del", n.Bridge)
	if n.release != nil {
		n.release()
	}
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killNetns SIGKILLs every process in namespace ns until none is left
// (10 s at most): tasks that left their agent's process group.
func killNetns(ns string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil || len(strings.Fields(string(out))) == 0 {
			return
		}
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// allocPID finds a live process of allocation allocID (NOMAD_ALLOC_ID in
// its environment) whose network namespace is not the host's.
func allocPID(allocID, hostNSPath string) (int, error) {
	host, err := inode(hostNSPath)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("failed to list processes: %w", err)
	}
	want := []byte("NOMAD_ALLOC_ID=" + allocID + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !strings.Contains(string(env), string(want)) {
			continue
		}
		if ino, err := inode(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && ino != host {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%w: no process of allocation %s in its own network namespace", ErrNoProcess, allocID[:8])
}

// nsHTTPClient is an HTTP client whose connections are made inside the
// namespace at nsPath (kept alive between requests).
func nsHTTPClient(nsPath string) *http.Client {
	tr := &http.Transport{
		DialContext:         netnsdial.New(nsPath).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: 3 * time.Second}
}
