package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/uuid"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestBrokenPluginLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	tn := newTestNetWith(t, copyPlugins(t, "", "portmap"), 24)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	st, err := tn.m.Setup(t.Context(), a)
	if st != nil || !errors.Is(err, ErrPluginFailed) || !strings.Contains(err.Error(), `plugin type="portmap" failed (add)`) ||
		!strings.Contains(err.Error(), "simulated failure") || !strings.Contains(err.Error(), a.ID) {
		t.Fatalf("Setup = %v, %v; want ErrPluginFailed naming portmap, its message and the allocation", st, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is not one line: %q", err)
	}
	tn.requireClean(a.ID)
}

func TestMissingPluginLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	dir := copyPlugins(t, "bridge")
	tn := newTestNetWith(t, dir, 24)
	a := tn.alloc()
	_, err := tn.m.Setup(t.Context(), a)
	want := `CNI plugin "bridge" not found in ` + dir + "; run `make cni` or set cni_path"
	if !errors.Is(err, ErrPluginMissing) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Setup = %v; want ErrPluginMissing with %q", err, want)
	}
	tn.requireClean(a.ID)
}

func TestSubnetExhausted(t *testing.T) {
	testutil.RequireRoot(t)
	tn := newTestNetWith(t, realPluginDir(t), 30) // one usable address
	tn.setup(tn.alloc())
	b := tn.alloc()
	_, err := tn.m.Setup(t.Context(), b)
	if !errors.Is(err, ErrSubnetExhausted) || !strings.Contains(err.Error(), "no free address in subnet "+tn.cfg.Subnet) {
		t.Fatalf("Setup = %v; want ErrSubnetExhausted", err)
	}
	if _, err := os.Stat(tn.m.NetNSPath(b.ID)); err == nil {
		t.Fatal("namespace of the failed allocation left behind")
	}
	if n := tn.vethCount(); n != 1 {
		t.Fatalf("%d veths on the bridge, want 1 (the first allocation's)", n)
	}
}

func TestTeardownIsIdempotent(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t)})
	tn.setup(a)
	for i := range 2 {
		if err := tn.m.Teardown(t.Context(), a); err != nil {
			t.Fatalf("Teardown #%d: %v", i+1, err)
		}
	}
	tn.requireClean(a.ID)
	if err := tn.m.Teardown(t.Context(), tn.alloc()); err != nil {
		t.Fatalf("Teardown of an allocation never set up: %v", err)
	}
}

// TestTeardownWhenDELFails: with the bridge and portmap plugins broken
// after Setup, Teardown still removes the rules (by their tags), the lease
// and the namespace.
func TestTeardownWhenDELFails(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	tn.setup(a)
	cfg := tn.cfg
	cfg.PluginDir = copyPlugins(t, "", "bridge", "portmap")
	broken, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := broken.Teardown(t.Context(), a); err != nil {
		t.Fatalf("Teardown with failing DEL: %v", err)
	}
	tn.requireClean(a.ID)
}

func TestRestore(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t)}), tn.alloc()
	stA, stB := tn.setup(a), tn.setup(b)
	inode := nsInode(t, tn.m.NetNSPath(a.ID))

	// A new Manager (agent restart) reuses the namespace and its address.
	m2 := tn.newManager()
	got, err := m2.Restore(t.Context(), a)
	if err != nil || got.Address != stA.Address {
		t.Fatalf("Restore = %+v, %v; want address %s", got, err, stA.Address)
	}
	if nsInode(t, tn.m.NetNSPath(a.ID)) != inode {
		t.Fatal("Restore replaced a healthy namespace")
	}
	// Setup of an allocation whose namespace exists behaves like Restore.
	if got, err := m2.Setup(t.Context(), a); err != nil || got.Address != stA.Address {
		t.Fatalf("second Setup = %+v, %v; want address %s", got, err, stA.Address)
	}

	// Break it: delete eth0 inside. Restore rebuilds once, in place.
	err = ns.WithNetNSPath(m2.NetNSPath(a.ID), func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatalf("delete eth0: %v", err)
	}
	got, err = m2.Restore(t.Context(), a)
	if err != nil || got == nil {
		t.Fatalf("Restore after breaking: %v", err)
	}
	if nsInode(t, m2.NetNSPath(a.ID)) != inode {
		t.Fatal("rebuild replaced the namespace (tasks would lose their network)")
	}
	if eth0 := addrOfEth0(t, m2.NetNSPath(a.ID)); eth0 != got.Address {
		t.Fatalf("rebuilt eth0 has %s, status says %s", eth0, got.Address)
	}
	l := listenIn(t, m2.NetNSPath(a.ID), net.JoinHostPort(got.Address, "0"), "rebuilt")
	if s, err := dialFrom(m2.NetNSPath(b.ID), l.Addr().String(), dialTimeout); err != nil || s != "rebuilt" {
		t.Fatalf("B -> rebuilt A: %q, %v", s, err)
	}
	if again, err := m2.Restore(t.Context(), a); err != nil || again.Address != got.Address {
		t.Fatalf("second Restore = %+v, %v; want the rebuilt address %s kept", again, err, got.Address)
	}

	// A namespace lost entirely (reboot) is set up afresh. A reboot leaves
	// no veth either; unmounting leaves the kernel to destroy the namespace
	// and its veth pair in its own time (seconds to minutes under namespace
	// churn), so the test deletes the pair itself.
	bVeth := hostVethOf(t, m2.NetNSPath(b.ID))
	if err := removeNetNS(m2.NetNSPath(b.ID)); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(bVeth); err != nil && !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("delete the lost namespace's veth: %v", err)
	}
	got, err = m2.Restore(t.Context(), b)
	if !errors.Is(err, ErrNamespaceLost) || got == nil || !strings.HasPrefix(got.Address, tn.prefix) {
		t.Fatalf("Restore of a lost namespace = %+v, %v; want the new network's status and ErrNamespaceLost (was %s)", got, err, stB.Address)
	}
	if !strings.Contains(err.Error(), b.ID) || !strings.Contains(err.Error(), m2.NetNSPath(b.ID)) {
		t.Fatalf("ErrNamespaceLost error %q does not name the allocation and its namespace", err)
	}
	if eth0 := addrOfEth0(t, m2.NetNSPath(b.ID)); eth0 != got.Address {
		t.Fatalf("new namespace's eth0 has %s, status says %s", eth0, got.Address)
	}
	// Once recreated, the namespace is there: the next Restore is a plain one.
	if again, err := m2.Restore(t.Context(), b); err != nil || again.Address != got.Address {
		t.Fatalf("Restore after the recreation = %+v, %v; want %s and no error", again, err, got.Address)
	}
	for _, x := range []*structs.Allocation{a, b} {
		if err := m2.Teardown(t.Context(), x); err != nil {
			t.Fatal(err)
		}
	}
	tn.requireClean(a.ID, b.ID)
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var ino uint64
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		fi, err := os.Stat("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		ino = fi.Sys().(*syscall.Stat_t).Ino
		return nil
	})
	if err != nil {
		t.Fatalf("stat namespace %s: %v", path, err)
	}
	return ino
}

func TestGCRemovesLeakedKeepsLive(t *testing.T) {
	tn := newTestNet(t)
	live := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t)})
	leaked := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t)})
	lost := tn.alloc() // leaked and its CNI cache lost too
	stLive := tn.setup(live)
	stLeaked, stLost := tn.setup(leaked), tn.setup(lost)
	if err := tn.m.removeCache(lost.ID); err != nil {
		t.Fatal(err)
	}

	// Another network on the same host (another agent, another test):
	// GC of the first must not touch it.
	other := newTestNet(t)
	bystander := other.alloc(structs.PortMapping{Label: "http", Value: freePort(t)})
	stBystander := other.setup(bystander)

	m2 := tn.newManager() // a restarted agent that only knows the live one
	// The live one is first reported dead, then live once GC holds its
	// lock (placed meanwhile): GC asks again under the lock and keeps it.
	var asked atomic.Int32
	isLive := func(id string) bool { return id == live.ID && asked.Add(1) > 1 }
	if err := m2.GC(t.Context(), isLive); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if r := tn.residueOf([]string{leaked.ID, lost.ID}, []string{stLeaked.Address, stLost.Address}); len(r) > 0 {
		t.Fatalf("GC left the leaked allocations' state:\n  %s", strings.Join(r, "\n  "))
	}
	if n := tn.vethCount(); n != 1 {
		t.Fatalf("%d veths on the bridge after GC, want 1", n)
	}
	if got := addrOfEth0(t, m2.NetNSPath(live.ID)); got != stLive.Address {
		t.Fatalf("live allocation's eth0 = %s, want %s", got, stLive.Address)
	}
	if st, err := m2.Restore(t.Context(), live); err != nil || st.Address != stLive.Address {
		t.Fatalf("live allocation fails its check after GC: %+v, %v", st, err)
	}
	if st, err := other.m.Restore(t.Context(), bystander); err != nil || st.Address != stBystander.Address {
		t.Fatalf("GC of another network broke this one: %+v, %v", st, err)
	}
	if err := m2.GC(t.Context(), liveIDs()); err != nil {
		t.Fatalf("GC of everything: %v", err)
	}
	tn.requireClean(live.ID, leaked.ID, lost.ID)
}

// residueOf lists state of the given allocations (with addresses ips)
// only: other allocations of the network may still exist.
func (tn *testNet) residueOf(ids, ips []string) []string {
	var out []string
	for _, id := range ids {
		if _, err := os.Stat(tn.m.NetNSPath(id)); err == nil {
			out = append(out, "namespace "+id)
		}
		if _, err := os.Stat(tn.m.recordPath(id)); err == nil {
			out = append(out, "record "+id)
		}
		if len(tn.m.leaseIPs(id)) > 0 {
			out = append(out, "lease of "+id)
		}
		if atts, _ := tn.m.cni.GetCachedAttachments(id); len(atts) > 0 {
			out = append(out, "CNI cache entry of "+id)
		}
	}
	needles := tn.chainNames(ids)
	for _, ip := range ips {
		needles = append(needles, " "+ip+"/32 ")
	}
	return append(out, tn.iptablesLines(needles)...)
}

func TestNamedCNINetwork(t *testing.T) {
	tn := newTestNet(t)
	data, err := BuildConfList(Config{BridgeName: tn.cfg.BridgeName, Subnet: tn.cfg.Subnet, NetworkName: "custom",
		StateDir: tn.cfg.StateDir, AdminChain: tn.cfg.AdminChain})
	if err != nil {
		t.Fatal(err)
	}
	// Found by its "name", not by the file name.
	if err := os.WriteFile(filepath.Join(tn.cfg.ConfigDir, "10-net.conflist"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	a := testAlloc("cni/custom")
	st, err := tn.m.Setup(t.Context(), a)
	if err != nil || st == nil || !strings.HasPrefix(st.Address, tn.prefix) {
		t.Fatalf("Setup cni/custom = %+v, %v", st, err)
	}
	if got := addrOfEth0(t, tn.m.NetNSPath(a.ID)); got != st.Address {
		t.Fatalf("eth0 = %s, status %s", got, st.Address)
	}
	if err := tn.m.Teardown(context.Background(), a); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if _, err := os.Stat(tn.m.NetNSPath(a.ID)); err == nil {
		t.Fatal("namespace left after Teardown")
	}
	if n := tn.vethCount(); n != 0 {
		t.Fatalf("%d veths left", n)
	}
}

// TestChurn runs 100 setup/teardown cycles (20 with -short, 40 under the
// race detector, which the plain run of the same test precedes); one
// cycle in ten maps a port (a port adds portmap's iptables work and its
// UDP conntrack flush to the cycle).
func TestChurn(t *testing.T) {
	tn := newTestNet(t)
	cycles := 100
	switch {
	case testing.Short():
		cycles = 20
	case raceEnabled:
		cycles = 40
	}
	port := freePort(t)
	ids := make([]string, 0, cycles)
	start := time.Now()
	for i := range cycles {
		a := testAlloc("bridge")
		if i%10 == 0 {
			a = testAlloc("bridge", structs.PortMapping{Label: "http", Value: port, To: 8080})
		}
		ids = append(ids, a.ID)
		if _, err := tn.m.Setup(t.Context(), a); err != nil {
			t.Fatalf("cycle %d: Setup: %v", i, err)
		}
		if err := tn.m.Teardown(t.Context(), a); err != nil {
			t.Fatalf("cycle %d: Teardown: %v", i, err)
		}
	}
	t.Logf("%d setup/teardown cycles in %s", cycles, time.Since(start).Round(time.Millisecond))
	tn.requireClean(ids...)
}

// hostVethOf returns the host end of the veth whose other end is eth0 in
// the namespace at nsPath.
func hostVethOf(t *testing.T, nsPath string) netlink.Link {
	t.Helper()
	var peer int
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		v, ok := l.(*netlink.Veth)
		if !ok {
			return fmt.Errorf("eth0 is a %s, not a veth", l.Type())
		}
		peer, err = netlink.VethPeerIndex(v)
		return err
	})
	if err != nil {
		t.Fatalf("find eth0's peer in %s: %v", nsPath, err)
	}
	l, err := netlink.LinkByIndex(peer)
	if err != nil {
		t.Fatalf("host end of %s's veth (index %d): %v", nsPath, peer, err)
	}
	return l
}

// TestSetupOverLeftovers: a Setup that finds state of an earlier setup of
// the allocation without its namespace (the agent lost the allocation's
// client state, then the namespace) sets up afresh with one lease.
func TestSetupOverLeftovers(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 8080})
	tn.setup(a)
	path := tn.m.NetNSPath(a.ID)
	veth := hostVethOf(t, path)
	if err := removeNetNS(path); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(veth); err != nil && !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("delete the lost namespace's veth: %v", err)
	}
	got, err := tn.newManager().Setup(t.Context(), a)
	if err != nil || !strings.HasPrefix(got.Address, tn.prefix) {
		t.Fatalf("Setup over leftovers = %+v, %v", got, err)
	}
	if n := len(tn.m.leaseIPs(a.ID)); n != 1 {
		t.Fatalf("%d leases for the allocation, want 1", n)
	}
	if err := tn.m.Teardown(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	tn.requireClean(a.ID)
}

// TestGCRemovesJunkKeepsLive: GC releases a lease with no container ID
// (a crash between host-local creating and writing it) and removes a
// record's leftover temp file, without mistaking the empty ID for an
// allocation: NetNSPath("") is NetNSDir, whose unmount would take every
// namespace with it.
func TestGCRemovesJunkKeepsLive(t *testing.T) {
	nsDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(nsDir, unix.MNT_DETACH) })
	tn := newTestNet(t)
	tn.cfg.NetNSDir = nsDir
	tn.m = tn.newManager()
	live := tn.alloc()
	st := tn.setup(live)
	junk := filepath.Join(tn.m.leaseDir(), tn.prefix+"200")
	temp := filepath.Join(recordDir(tn.cfg), ".tmp-"+uuid.NewString()+"-123")
	for _, f := range []string{junk, temp} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.newManager().GC(t.Context(), liveIDs(live.ID)); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if !netNSExists(tn.m.NetNSPath(live.ID)) {
		t.Fatal("GC removed the live allocation's namespace")
	}
	if got := addrOfEth0(t, tn.m.NetNSPath(live.ID)); got != st.Address {
		t.Fatalf("live eth0 = %s, want %s", got, st.Address)
	}
	for _, f := range []string{junk, temp} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("GC kept %s (%v)", f, err)
		}
	}
}

// TestPortmapOnlyWhenPortsMapped: an allocation that maps no port is set
// up without the portmap plugin (its ADD would only hand its input on) and
// one that maps a port with it; each is torn down with the list it was set
// up with and leaves nothing, and the mapped port answers through
// 127.0.0.1 while a no-port allocation's setup runs beside it.
func TestPortmapOnlyWhenPortsMapped(t *testing.T) {
	tn := newTestNet(t)
	port := freePort(t)
	plain, mapped := tn.alloc(), tn.alloc(structs.PortMapping{Label: "http", Value: port, To: 8080})
	st := tn.setup(mapped)
	tn.setup(plain)
	types := func(id string) []string {
		t.Helper()
		atts, err := tn.m.cni.GetCachedAttachments(id)
		if err != nil || len(atts) != 1 {
			t.Fatalf("cached attachments of %s: %d, %v", id, len(atts), err)
		}
		list, err := libcni.NetworkConfFromBytes(atts[0].Config)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range list.Plugins {
			out = append(out, p.Network.Type)
		}
		return out
	}
	if got := strings.Join(types(plain.ID), ","); got != "loopback,bridge,firewall" {
		t.Errorf("plugins of the allocation without ports = %s; want loopback,bridge,firewall", got)
	}
	if got := strings.Join(types(mapped.ID), ","); got != "loopback,bridge,firewall,portmap" {
		t.Errorf("plugins of the allocation with a port = %s; want loopback,bridge,firewall,portmap", got)
	}
	ln := listenIn(t, tn.m.NetNSPath(mapped.ID), st.Address+":8080", "mapped")
	defer ln.Close()
	if got, err := dialFrom("", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second); err != nil || got != "mapped" {
		t.Fatalf("host port through 127.0.0.1: %q, %v", got, err)
	}
	for _, a := range []*structs.Allocation{plain, mapped} {
		if err := tn.m.Teardown(t.Context(), a); err != nil {
			t.Fatalf("Teardown(%s): %v", a.ID, err)
		}
	}
	tn.requireClean(plain.ID, mapped.ID)
}
