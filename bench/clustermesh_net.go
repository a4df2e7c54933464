package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The Cluster mesh area's hosts' network: a bridge in the root namespace
// with <prefix>.1/24 on a free 10.2xx.yyy.0/24, and per host a network
// namespace whose eth0 (<prefix>.N/24) is a veth on the bridge (the shape
// of e2e/cluster's harness). Everything it makes is listed and removed by
// teardown, which first kills what still runs in the namespaces.

// ErrNoSubnet is returned when no free private subnet is left for the
// bench's bridge.
var ErrNoSubnet = errors.New("no free 10.200-249.100-249.0/24 subnet")

// subnetReservations is the directory e2e/cluster and e2e/framework
// reserve their subnets in; the bench reserves its own there too.
var subnetReservations = filepath.Join(os.TempDir(), "meshlet-e2e-subnets")

// meshNet is the bench-created bridge and host namespaces.
type meshNet struct {
	Bridge  string
	Prefix  string // "10.x.y": host N is Prefix.N
	reserve string // reservation file, removed by teardown

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
	subnet, path, err := pickSubnet()
	if err != nil {
		return nil, err
	}
	n.reserve = path
	n.Prefix = strings.TrimSuffix(subnet, ".0/24")
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
	if n.reserve != "" {
		_ = os.Remove(n.reserve)
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
	host, err := nsInode(hostNSPath)
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
		if ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && ino != host {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%w: no process of allocation %s in its own network namespace", ErrNoProcess, allocID[:8])
}

func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("failed to stat namespace %s: %w", path, err)
	}
	return st.Ino, nil
}

// pickSubnet returns a 10.2xx.yyy.0/24 that overlaps no route or address
// of the host, reserved (a file in subnetReservations) against parallel
// tests and benches, and the reservation's path.
func pickSubnet() (subnet, reservation string, err error) {
	used, err := hostNets()
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(subnetReservations, 0o755); err != nil {
		return "", "", fmt.Errorf("failed to reserve a subnet: %w", err)
	}
	const span = 50 * 150
	start, err := rand.Int(rand.Reader, big.NewInt(span))
	if err != nil {
		return "", "", fmt.Errorf("failed to pick a subnet: %w", err)
	}
	for i := 0; i < span; i++ {
		k := (int(start.Int64()) + i) % span
		s := fmt.Sprintf("10.%d.%d.0/24", 200+k/150, 100+k%150)
		_, cidr, _ := net.ParseCIDR(s)
		if netsOverlap(used, cidr) {
			continue
		}
		path := filepath.Join(subnetReservations, strings.ReplaceAll(s, "/", "_"))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			continue
		}
		f.Close()
		return s, path, nil
	}
	return "", "", ErrNoSubnet
}

func netsOverlap(used []*net.IPNet, cidr *net.IPNet) bool {
	for _, u := range used {
		if u.Contains(cidr.IP) || cidr.Contains(u.IP) {
			return true
		}
	}
	return false
}

// hostNets are the destinations of every IPv4 route (all tables) and
// every interface address of the root namespace.
func hostNets() ([]*net.IPNet, error) {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("failed to list routes: %w", err)
	}
	used := parseRouteDests(string(out))
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("failed to list addresses: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			used = append(used, ipn)
		}
	}
	return used, nil
}

// parseRouteDests reads the destinations of `ip -4 -o route show`
// lines (a leading route type skipped, "default" ignored).
func parseRouteDests(out string) []*net.IPNet {
	types := map[string]bool{"local": true, "broadcast": true, "unicast": true, "multicast": true,
		"unreachable": true, "blackhole": true, "prohibit": true, "throw": true, "anycast": true, "nat": true}
	var used []*net.IPNet
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && types[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, cidr, err := net.ParseCIDR(dst); err == nil {
			used = append(used, cidr)
		}
	}
	return used
}

// dialInNetns dials addr from inside the network namespace at nsPath:
// the socket is made on an OS thread switched into that namespace and
// stays there; the thread is switched back (or, when that fails, never
// unlocked, so that the runtime discards it).
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("failed to open the thread's namespace: %w", err)}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("failed to open namespace %s: %w", nsPath, err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("failed to enter namespace %s: %w", nsPath, err)}
			return
		}
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			ch <- result{c: c, err: err} // the thread stays locked and dies with this goroutine
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c: c, err: err}
	}()
	r := <-ch
	return r.c, r.err
}

// nsHTTPClient is an HTTP client whose connections are made inside the
// namespace at nsPath (kept alive between requests).
func nsHTTPClient(nsPath string) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, nsPath, network, addr)
		},
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: 3 * time.Second}
}
