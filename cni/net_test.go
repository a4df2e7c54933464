package cni

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/meshlet/meshlet/structs"
	"github.com/vishvananda/netlink"
)

const (
	dialTimeout = 10 * time.Second // hang guard for dials that must work
	denyTimeout = time.Second      // dials that must fail: refused, or dropped
)

func TestAllocationsReachEachOther(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.alloc(), tn.alloc()
	stA, stB := tn.setup(a), tn.setup(b)
	if stA.Address == stB.Address {
		t.Fatalf("both allocations got %s", stA.Address)
	}
	for _, x := range []struct {
		alloc *structs.Allocation
		addr  string
	}{{a, stA.Address}, {b, stB.Address}} {
		if got := addrOfEth0(t, tn.m.NetNSPath(x.alloc.ID)); got != x.addr {
			t.Fatalf("eth0 in %s has %q, status says %q", x.alloc.ID, got, x.addr)
		}
	}
	// `ip netns exec <alloc-id>` finds the namespace by name.
	if out, err := exec.Command("ip", "netns", "exec", b.ID, "ip", "-4", "-o", "addr", "show", "eth0").CombinedOutput(); err != nil || !strings.Contains(string(out), stB.Address) {
		t.Fatalf("ip netns exec %s: %v\n%s", b.ID, err, out)
	}

	l := listenIn(t, tn.m.NetNSPath(b.ID), net.JoinHostPort(stB.Address, "0"), "hello from B")
	got, err := dialFrom(tn.m.NetNSPath(a.ID), l.Addr().String(), dialTimeout)
	if err != nil || got != "hello from B" {
		t.Fatalf("A -> B %s: %q, %v", l.Addr(), got, err)
	}
	l = listenIn(t, tn.m.NetNSPath(a.ID), net.JoinHostPort(stA.Address, "0"), "hello from A")
	if got, err := dialFrom(tn.m.NetNSPath(b.ID), l.Addr().String(), dialTimeout); err != nil || got != "hello from A" {
		t.Fatalf("B -> A %s: %q, %v", l.Addr(), got, err)
	}
}

func TestLoopbackListenerIsIsolated(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.alloc(), tn.alloc()
	stA, _ := tn.setup(a), tn.setup(b)
	l := listenIn(t, tn.m.NetNSPath(a.ID), "127.0.0.1:0", "secret")
	port := strconv.Itoa(portOf(l))

	// Positive control: the listener answers inside its own namespace.
	if got, err := dialFrom(tn.m.NetNSPath(a.ID), l.Addr().String(), dialTimeout); err != nil || got != "secret" {
		t.Fatalf("inside A: %q, %v", got, err)
	}
	cases := []struct{ from, addr string }{
		{"", net.JoinHostPort(stA.Address, port)},                   // host -> A's address
		{tn.m.NetNSPath(b.ID), net.JoinHostPort(stA.Address, port)}, // B -> A's address
		{tn.m.NetNSPath(b.ID), net.JoinHostPort("127.0.0.1", port)}, // B's own loopback
	}
	for _, c := range cases {
		got, err := dialFrom(c.from, c.addr, denyTimeout)
		if !isRefusedOrTimeout(err) || got == "secret" {
			t.Errorf("dial %s from %q = %q, %v; want refused or timeout", c.addr, c.from, got, err)
		}
	}
}

func TestPortMappingOnHostLoopback(t *testing.T) {
	tn := newTestNet(t)
	static, dynamic := freePort(t), freePort(t)
	for dynamic == static {
		dynamic = freePort(t)
	}
	a := tn.alloc(
		structs.PortMapping{Label: "static", Value: static},         // to unset: same port inside
		structs.PortMapping{Label: "dyn", Value: dynamic, To: 8080}, // to != value
	)
	tn.setup(a)
	listenIn(t, tn.m.NetNSPath(a.ID), fmt.Sprintf("0.0.0.0:%d", static), "static")
	listenIn(t, tn.m.NetNSPath(a.ID), "0.0.0.0:8080", "dynamic")

	for port, want := range map[int]string{static: "static", dynamic: "dynamic"} {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if got, err := dialFrom("", addr, dialTimeout); err != nil || got != want {
			t.Fatalf("host -> %s: %q, %v; want %q", addr, got, err, want)
		}
	}
	data, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + tn.cfg.BridgeName + "/route_localnet")
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		t.Fatalf("route_localnet on %s = %q, %v; want 1", tn.cfg.BridgeName, data, err)
	}

	if err := tn.m.Teardown(t.Context(), a); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got, err := dialFrom("", fmt.Sprintf("127.0.0.1:%d", static), denyTimeout); err == nil {
		t.Fatalf("host port still answers after Teardown: %q", got)
	}
	tn.requireClean(a.ID)
}

// addrOfEth0 returns the IPv4 address of eth0 inside a namespace.
func addrOfEth0(t *testing.T, nsPath string) string {
	t.Helper()
	addr, err := eth0Addr(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// eth0Addr returns the IPv4 address of eth0 in the namespace at nsPath.
func eth0Addr(nsPath string) (string, error) {
	var addr string
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) == 0 {
			return fmt.Errorf("no IPv4 address on eth0: %w", err)
		}
		addr = addrs[0].IP.String()
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("eth0 in %s: %w", nsPath, err)
	}
	return addr, nil
}
