package cni

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
	"github.com/vishvananda/netlink"
)

// TestMasqueradeOutsideSubnet: after Setup the network's masquerade rule
// exists, no per-allocation masquerade chain does, and traffic from the
// namespace to an address outside the subnet (in a peer namespace behind
// a veth the test creates) arrives from the host's address on that veth.
// The rule stays after Teardown and is not duplicated by a restart.
func TestMasqueradeOutsideSubnet(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc()
	st := tn.setup(a)

	rules := natRulesOf(t, tn.cfg.BridgeName)
	if len(rules) != 4 {
		t.Fatalf("%d rules of the network in %s, want 4", len(rules), postroutingChain)
	}
	if masq := rules[3]; masq.arg("-s") != tn.cfg.Subnet || masq.arg("-d") != "224.0.0.0/4" || masq.target() != "MASQUERADE" {
		t.Fatalf("outbound masquerade rule = %v; want -s %s ! -d 224.0.0.0/4 -j MASQUERADE", masq.spec, tn.cfg.Subnet)
	}
	if keep := rules[2]; keep.arg("-s") != tn.cfg.Subnet || keep.arg("-d") != tn.cfg.Subnet || keep.target() != "RETURN" {
		t.Fatalf("keep rule = %v; want -s %s -d %s -j RETURN", keep.spec, tn.cfg.Subnet, tn.cfg.Subnet)
	}
	if n := natJumps(t); n != 1 {
		t.Fatalf("nat POSTROUTING has %d jumps to %s, want 1", n, postroutingChain)
	}
	chain := utils.FormatChainName(tn.cfg.NetworkName, a.ID)
	if err := exec.Command("iptables", "-w", "10", "-t", "nat", "-S", chain).Run(); err == nil {
		t.Fatalf("the bridge plugin created per-allocation masquerade chain %s", chain)
	}

	hostAddr, peerAddr, peerNS := peerNetwork(t, tn.prefix)
	l := listenReportingSource(t, peerNS, net.JoinHostPort(peerAddr, "0"))
	got, err := dialFrom(tn.m.NetNSPath(a.ID), l.Addr().String(), dialTimeout)
	if err != nil || got != hostAddr {
		t.Fatalf("%s -> %s: peer saw source %q, %v; want the masqueraded %s", st.Address, l.Addr(), got, err, hostAddr)
	}

	if err := tn.m.Teardown(t.Context(), a); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if n := len(natRulesOf(t, tn.cfg.BridgeName)); n != 4 {
		t.Fatalf("%d rules of the network after Teardown, want 4 (kept)", n)
	}
	tn.requireClean(a.ID)

	// A restarted agent finds the rules in place and adds none.
	tn.m = tn.newManager()
	tn.setup(tn.alloc())
	if n := len(natRulesOf(t, tn.cfg.BridgeName)); n != 4 {
		t.Fatalf("%d rules of the network after a restart, want 4", n)
	}
}

// TestHairpinThroughHostPort: an allocation reaching another one through
// the bridge address and a host port is masqueraded (so the reply comes
// back through the host even without br_netfilter), by meshlet's hairpin
// rule now that portmap's snat is off. (An allocation reaching its own host port
// this way needs hairpinMode on the bridge, which is off, as in Nomad.)
func TestHairpinThroughHostPort(t *testing.T) {
	tn := newTestNet(t)
	port := freePort(t)
	a, b := tn.alloc(structs.PortMapping{Label: "http", Value: port, To: 8080}), tn.alloc()
	tn.setup(a)
	tn.setup(b)
	listenReportingSource(t, tn.m.NetNSPath(a.ID), "0.0.0.0:8080")
	gw := tn.prefix + "1"
	addr := net.JoinHostPort(gw, fmt.Sprint(port))
	if got, err := dialFrom(tn.m.NetNSPath(b.ID), addr, dialTimeout); err != nil || got != gw {
		t.Fatalf("B -> %s: A saw source %q, %v; want the masqueraded %s", addr, got, err, gw)
	}
}

// TestEnsureNAT: each step is an agent start (a new Manager) after the
// host's rules were changed; ensuring leaves exactly the network's four
// rules for its current subnet, in order, and one jump from POSTROUTING.
func TestEnsureNAT(t *testing.T) {
	testutil.RequireRoot(t)
	bridge := fmt.Sprintf("mtnat%d", netSeq.Add(1))
	t.Cleanup(func() { removeBridgeNAT(t, bridge) })
	deleteFirst := func() {
		r := natRulesOf(t, bridge)[0]
		if err := exec.Command("iptables", append([]string{"-w", "10", "-t", "nat", "-D", r.chain}, r.spec...)...).Run(); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		subnet string
		before func()
	}{
		{"fresh", "10.251.250.0/24", nil},
		{"subnet changed", "10.251.251.0/24", nil},
		{"all in place", "10.251.251.0/24", nil},
		{"first rule lost", "10.251.251.0/24", deleteFirst},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		m, err := New(Config{Subnet: s.subnet, NetworkName: bridge, BridgeName: bridge, StateDir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		hostMu.Lock()
		err = m.ensureNATLocked()
		hostMu.Unlock()
		if err != nil {
			t.Fatalf("%s: ensureNATLocked: %v", s.name, err)
		}
		var comments []string
		for _, r := range natRulesOf(t, bridge) {
			comments = append(comments, r.comment())
		}
		var want []string
		for _, r := range networkRules(bridge, s.subnet) {
			want = append(want, r.comment)
		}
		if !slices.Equal(comments, want) {
			t.Fatalf("%s: rules %q, want %q", s.name, comments, want)
		}
		if n := natJumps(t); n != 1 {
			t.Fatalf("%s: %d jumps to %s, want 1", s.name, n, postroutingChain)
		}
	}
}

// natJumps counts the rules of nat POSTROUTING that jump to meshlet's chain.
func natJumps(t *testing.T) int {
	out, err := exec.Command("iptables", "-w", "10", "-t", "nat", "-S", "POSTROUTING").Output()
	if err != nil {
		t.Fatalf("iptables -S POSTROUTING: %v", err)
	}
	_, rules := parseRules("nat", out)
	n := 0
	for _, r := range rules {
		if r.target() == postroutingChain {
			n++
		}
	}
	return n
}

// peerNetwork creates a namespace linked to the host by a veth pair on a
// /30 outside the test subnet (10.252.N.0/30 for subnet 10.251.N.0/24)
// and returns the host's address, the peer's address and the namespace.
func peerNetwork(t *testing.T, prefix string) (hostAddr, peerAddr, nsPath string) {
	n := strings.TrimSuffix(strings.TrimPrefix(prefix, "10.251."), ".")
	hostAddr, peerAddr = "10.252."+n+".1", "10.252."+n+".2"
	nsPath = filepath.Join(t.TempDir(), "peer")
	if err := createNetNS(nsPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNetNS(nsPath) })
	hostIf, peerIf := "mph"+n, "mpp"+n
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: peerIf}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s: %v", hostIf, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostIf); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	peerNS, err := ns.GetNS(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer peerNS.Close()
	peer, err := netlink.LinkByName(peerIf)
	if err == nil {
		err = netlink.LinkSetNsFd(peer, int(peerNS.Fd()))
	}
	if err == nil {
		err = upWithAddr(hostIf, hostAddr+"/30")
	}
	if err == nil {
		err = peerNS.Do(func(ns.NetNS) error { return upWithAddr(peerIf, peerAddr+"/30") })
	}
	if err != nil {
		t.Fatalf("set up peer network: %v", err)
	}
	return hostAddr, peerAddr, nsPath
}

func upWithAddr(ifName, cidr string) error {
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(l, addr); err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// listenReportingSource opens a TCP listener inside a namespace that
// answers every connection with the source address it sees.
func listenReportingSource(t *testing.T, nsPath, addr string) net.Listener {
	t.Helper()
	return listenAnswering(t, nsPath, addr, func(c net.Conn) string {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		return host
	})
}
