package cni

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils"
	"github.com/coreos/go-iptables/iptables"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
	"github.com/vishvananda/netlink"
)

// The standard plugins the built-in network uses.
var pluginPkgs = []string{"ipam/host-local", "main/bridge", "main/loopback", "meta/firewall", "meta/portmap"}

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
	builtDir   string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// realPluginDir returns a directory with the real plugin binaries:
// $MESHLET_CNI_PATH, or a temp dir they are built into once per test binary.
func realPluginDir(t testing.TB) string {
	t.Helper()
	pluginOnce.Do(func() {
		if p := os.Getenv("MESHLET_CNI_PATH"); p != "" {
			pluginDir = p
			return
		}
		builtDir, pluginErr = os.MkdirTemp("", "meshlet-cni-plugins-")
		if pluginErr != nil {
			return
		}
		args := []string{"build", "-o", builtDir + "/"}
		for _, p := range pluginPkgs {
			args = append(args, "github.com/containernetworking/plugins/plugins/"+p)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as `make cni` builds them
		out, err := cmd.CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("failed to build CNI plugins: %w\n%s", err, out)
			return
		}
		pluginDir = builtDir
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

func testAlloc(mode string, ports ...structs.PortMapping) *structs.Allocation {
	tg := &structs.TaskGroup{Name: "g"}
	if mode != "" {
		tg.Networks = []*structs.NetworkResource{{Mode: mode}}
	}
	return &structs.Allocation{
		ID: uuid.NewString(), Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		Job:                &structs.Job{ID: "web", Region: "global", TaskGroups: []*structs.TaskGroup{tg}},
		AllocatedResources: &structs.AllocatedResources{Shared: structs.AllocatedSharedResources{Ports: ports}},
	}
}

func mustCIDR(t *testing.T, s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return *n
}

var (
	netSeq  atomic.Uint32
	netBase = func() uint32 { n, _ := rand.Int(rand.Reader, big.NewInt(256)); return uint32(n.Int64()) }()
)

// testNet is one privileged test's own network: bridge, subnet, network
// name, admin chain and state dir, all removed in t.Cleanup.
type testNet struct {
	t      testing.TB
	cfg    Config
	m      *Manager
	prefix string // "10.251.N." of the subnet
	mu     sync.Mutex
	allocs []*structs.Allocation
}

func newTestNet(t *testing.T) *testNet {
	testutil.RequireRoot(t)
	return newTestNetWith(t, realPluginDir(t), 24)
}

func newTestNetWith(t testing.TB, plugins string, prefixLen int) *testNet {
	return newTestNetIn(t, plugins, prefixLen, t.TempDir())
}

// newTestNetIn is newTestNetWith with the state dir given (e.g. a small
// tmpfs the caller mounted before, so it is unmounted after the cleanup).
func newTestNetIn(t testing.TB, plugins string, prefixLen int, stateDir string) *testNet {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	n := (netBase + netSeq.Add(1)) % 256
	tn := &testNet{t: t, prefix: fmt.Sprintf("10.251.%d.", n)}
	tn.cfg = Config{
		PluginDir: plugins, ConfigDir: t.TempDir(), BridgeName: "mtb" + suffix,
		Subnet: fmt.Sprintf("10.251.%d.0/%d", n, prefixLen), NetworkName: "mtest-" + suffix,
		StateDir: stateDir, AdminChain: "MT-ADMIN-" + suffix,
	}
	tn.m = tn.newManager()
	t.Cleanup(tn.cleanup)
	return tn
}

func (tn *testNet) newManager() *Manager {
	m, err := New(tn.cfg, hclog.New(&hclog.LoggerOptions{Name: tn.t.Name(), Level: hclog.Warn, Output: testWriter{tn.t}}))
	if err != nil {
		tn.t.Fatalf("New: %v", err)
	}
	m.retryDelay = func(int) time.Duration { return 10 * time.Millisecond }
	return m
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// alloc returns a fresh bridge allocation whose network the test cleanup
// tears down.
func (tn *testNet) alloc(ports ...structs.PortMapping) *structs.Allocation {
	a := testAlloc("bridge", ports...)
	tn.mu.Lock()
	tn.allocs = append(tn.allocs, a)
	tn.mu.Unlock()
	return a
}

func (tn *testNet) setup(a *structs.Allocation) *structs.AllocNetworkStatus {
	tn.t.Helper()
	st, err := tn.m.Setup(tn.t.Context(), a)
	if err != nil {
		tn.t.Fatalf("Setup: %v", err)
	}
	if st == nil || st.InterfaceName != "eth0" || !strings.HasPrefix(st.Address, tn.prefix) {
		tn.t.Fatalf("Setup status = %+v, want eth0 with an address in %s", st, tn.cfg.Subnet)
	}
	return st
}

func (tn *testNet) cleanup() {
	t := tn.t
	// t.Context() is already cancelled when cleanups run.
	ids := make([]string, 0, len(tn.allocs))
	for _, a := range tn.allocs {
		ids = append(ids, a.ID)
		if err := tn.m.Teardown(context.Background(), a); err != nil {
			t.Errorf("cleanup Teardown(%s): %v", a.ID, err)
		}
	}
	if r := tn.residue(ids...); len(r) > 0 && !t.Failed() {
		t.Errorf("left behind after Teardown:\n  %s", strings.Join(r, "\n  "))
	}
	if l, err := netlink.LinkByName(tn.cfg.BridgeName); err == nil {
		_ = netlink.LinkDel(l)
	}
	if ipt, err := iptables.New(); err == nil {
		adminRule := []string{"-m", "comment", "--comment", "CNI firewall plugin admin overrides", "-j", tn.cfg.AdminChain}
		for i := 0; i < 10; i++ { // concurrent first ADDs may have added it twice
			if ok, err := ipt.Exists("filter", "CNI-FORWARD", adminRule...); err != nil || !ok {
				break
			}
			_ = ipt.Delete("filter", "CNI-FORWARD", adminRule...)
		}
		_ = ipt.ClearAndDeleteChain("filter", tn.cfg.AdminChain)
	}
	removeBridgeNAT(t, tn.cfg.BridgeName)
}

// removeBridgeNAT deletes a test network's masquerade rules, which the
// Manager keeps by design, and checks they are gone. meshlet's shared
// chain and its jump stay: other tests and agents on the host use them.
func removeBridgeNAT(t testing.TB, bridge string) {
	if err := RemoveBridgeNAT(bridge); err != nil {
		t.Errorf("RemoveBridgeNAT(%s): %v", bridge, err)
	}
	if left := natRulesOf(t, bridge); len(left) > 0 {
		t.Errorf("RemoveBridgeNAT(%s) left %d rules", bridge, len(left))
	}
}

// natRulesOf returns the rules of the network on bridge in meshlet's
// POSTROUTING chain.
func natRulesOf(t testing.TB, bridge string) []rule {
	out, err := exec.Command("iptables", "-w", "10", "-t", "nat", "-S").Output()
	if err != nil {
		t.Fatalf("iptables -t nat -S: %v", err)
	}
	_, rules := parseRules("nat", out)
	return bridgeRules(rules, bridge)
}

// residue lists what is left of the given allocations and of this
// network's allocations in general: namespace files, records, veths on the
// bridge, leases, iptables rules/chains naming an ID, the subnet or the
// per-container chains. meshlet's own masquerade rules of the network are
// not residue: they stay by design.
func (tn *testNet) residue(ids ...string) []string {
	var out []string
	for _, id := range ids {
		if _, err := os.Stat(tn.m.NetNSPath(id)); err == nil {
			out = append(out, "namespace "+id)
		}
	}
	if recs, _ := os.ReadDir(recordDir(tn.cfg)); len(recs) > 0 {
		names := make([]string, 0, len(recs))
		for _, r := range recs {
			names = append(names, r.Name())
		}
		out = append(out, fmt.Sprintf("record dir entries %v", names))
	}
	if n := tn.vethCount(); n > 0 {
		out = append(out, fmt.Sprintf("%d veths on %s", n, tn.cfg.BridgeName))
	}
	if ls, _ := tn.m.leases(); len(ls) > 0 {
		out = append(out, fmt.Sprintf("leases %v", ls))
	}
	if entries, _ := os.ReadDir(filepath.Join(tn.cfg.StateDir, "cache", "results")); len(entries) > 0 {
		out = append(out, fmt.Sprintf("%d CNI cache entries", len(entries)))
	}
	needles := []string{tn.prefix, `"` + tn.cfg.NetworkName + `\"`}
	return append(out, tn.iptablesLines(append(needles, tn.chainNames(ids)...))...)
}

// chainNames returns the per-container chains of ids on this network.
func (tn *testNet) chainNames(ids []string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id, utils.FormatChainName(tn.cfg.NetworkName, id),
			utils.MustFormatChainNameWithPrefix(tn.cfg.NetworkName, id, "DN-"))
	}
	return out
}

// iptablesLines returns the nat and filter rules/chains containing a
// needle, except meshlet's own rules (comment "meshlet: ...").
func (tn *testNet) iptablesLines(needles []string) []string {
	var out []string
	for _, table := range []string{"nat", "filter"} {
		dump, err := exec.Command("iptables", "-w", "10", "-t", table, "-S").Output()
		if err != nil {
			tn.t.Fatalf("iptables -S: %v", err)
		}
		for _, line := range strings.Split(string(dump), "\n") {
			if strings.Contains(line, `--comment "`+commentPrefix) {
				continue
			}
			for _, n := range needles {
				if strings.Contains(line, n) {
					out = append(out, table+": "+line)
					break
				}
			}
		}
	}
	return out
}

func (tn *testNet) requireClean(ids ...string) {
	tn.t.Helper()
	if r := tn.residue(ids...); len(r) > 0 {
		tn.t.Fatalf("left behind:\n  %s", strings.Join(r, "\n  "))
	}
}

// vethCount counts host-side veths enslaved to the test's bridge.
func (tn *testNet) vethCount() int {
	br, err := netlink.LinkByName(tn.cfg.BridgeName)
	if err != nil {
		return 0
	}
	links, err := netlink.LinkList()
	if err != nil {
		tn.t.Fatalf("LinkList: %v", err)
	}
	n := 0
	for _, l := range links {
		if l.Type() == "veth" && l.Attrs().MasterIndex == br.Attrs().Index {
			n++
		}
	}
	return n
}

// listenIn opens a TCP listener inside a namespace ("" = host) that
// answers every connection with reply. The socket stays in the namespace.
func listenIn(t *testing.T, nsPath, addr, reply string) net.Listener {
	t.Helper()
	return listenAnswering(t, nsPath, addr, func(net.Conn) string { return reply })
}

// listenAnswering is listenIn with the answer computed per connection.
func listenAnswering(t *testing.T, nsPath, addr string, answer func(net.Conn) string) net.Listener {
	t.Helper()
	var l net.Listener
	listen := func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	}
	var err error
	if nsPath == "" {
		err = listen(nil)
	} else {
		err = ns.WithNetNSPath(nsPath, listen)
	}
	if err != nil {
		t.Fatalf("listen on %s in %q: %v", addr, nsPath, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(answer(c)))
			_ = c.Close()
		}
	}()
	return l
}

// dialFrom connects to addr from inside a namespace ("" = host) and
// returns what the server sent.
func dialFrom(nsPath, addr string, timeout time.Duration) (string, error) {
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
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// freePort returns a TCP port that was free on the host's loopback.
func freePort(t testing.TB) int { return testutil.FreePort(t) }

func portOf(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// copyPlugins copies the real plugins into a temp dir, leaving out skip
// and replacing each name in broken with a script that fails.
func copyPlugins(t *testing.T, skip string, broken ...string) string {
	dir := t.TempDir()
	src := realPluginDir(t)
	for _, p := range pluginPkgs {
		name := filepath.Base(p)
		if name == skip {
			continue
		}
		data := []byte("#!/bin/sh\necho 'simulated failure' >&2\nexit 1\n")
		if !contains(broken, name) {
			var err error
			if data, err = os.ReadFile(filepath.Join(src, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// isRefusedOrTimeout reports a failed dial.
func isRefusedOrTimeout(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || strings.Contains(err.Error(), "refused"))
}

// liveIDs is a GC liveness function: the given allocations are live.
func liveIDs(ids ...string) func(string) bool {
	return func(id string) bool { return contains(ids, id) }
}
