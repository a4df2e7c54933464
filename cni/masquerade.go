package cni

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// meshlet's own nat rules: the masquerading the bridge plugin (ipMasq) and
// the portmap plugin (snat) would otherwise set up per allocation, written
// once per network. Per allocation the plugins exec iptables 9 (bridge) and
// 5 + 8 per mapped port (portmap) times on every ADD for these rules alone;
// the built-in conflist turns both off and the Manager ensures, before its
// first ADD:
//
//	nat POSTROUTING (inserted first)  -j MESHLET-POSTROUTING
//	MESHLET-POSTROUTING, per network, in this order:
//	  -s <subnet> -d <subnet> -m conntrack --ctstate DNAT -j MASQUERADE  (host port hairpin)
//	  -s 127.0.0.1 -d <subnet> -m conntrack --ctstate DNAT -j MASQUERADE (host port via 127.0.0.1)
//	  -s <subnet> -d <subnet> -j RETURN                                   (inside the subnet)
//	  -s <subnet> ! -d 224.0.0.0/4 -j MASQUERADE                          (outbound)
//
// The first two match exactly the connections portmap's snat marks (only
// portmap DNATs into the subnet); the last two are the bridge plugin's
// per-container ipMasq chain, subnet-wide. Portmap with snat also turns on
// route_localnet on the bridge; Setup does that itself (routeLocalnet).
//
// Every rule carries a comment "meshlet: ..."; a rule is known by it, and
// a network's comments name its bridge and its subnet, so a changed
// subnet replaces the old rules. The rules stay when the agent stops:
// allocations outlive the agent process (their namespaces are re-adopted
// on restart) and need NAT meanwhile, and the rules of a network with no
// allocation match nothing (Docker keeps its MASQUERADE rules the same
// way). Teardown and GC never touch them; RemoveBridgeNAT removes a
// network's rules on request.
const (
	postroutingChain = "MESHLET-POSTROUTING"
	// commentPrefix starts the comment of every rule meshlet writes itself.
	commentPrefix = "meshlet: "
)

// natRule is one rule meshlet owns in the nat table, known by its comment.
type natRule struct {
	chain   string
	comment string
	spec    []string // without the comment match
}

func (r natRule) args() []string {
	return append([]string{"-m", "comment", "--comment", r.comment}, r.spec...)
}

// jumpRule sends nat POSTROUTING through meshlet's chain.
var jumpRule = natRule{chain: "POSTROUTING", comment: commentPrefix + "allocation networks",
	spec: []string{"-j", postroutingChain}}

// bridgeComment is the comment prefix of the rules of the network on
// bridge. Rules are keyed by bridge, the one name that is unique per host:
// agents side by side (tests, benchmarks) may share a network name but
// never a bridge.
func bridgeComment(bridge string) string {
	return commentPrefix + "bridge " + bridge + " "
}

// bridgeRules returns, in order, the rules of the network on bridge
// among rules (a listing of the nat table).
func bridgeRules(rules []rule, bridge string) []rule {
	prefix := bridgeComment(bridge)
	var out []rule
	for _, r := range rules {
		if r.chain == postroutingChain && strings.HasPrefix(r.comment(), prefix) {
			out = append(out, r)
		}
	}
	return out
}

// networkRules are the rules of the network on bridge, in the order they
// must have.
func networkRules(bridge, subnet string) []natRule {
	c := bridgeComment(bridge)
	dnat := []string{"-m", "conntrack", "--ctstate", "DNAT", "-j", "MASQUERADE"}
	return []natRule{
		{postroutingChain, c + "hairpin " + subnet, append([]string{"-s", subnet, "-d", subnet}, dnat...)},
		{postroutingChain, c + "localhost " + subnet, append([]string{"-s", "127.0.0.1", "-d", subnet}, dnat...)},
		{postroutingChain, c + "keeps " + subnet, []string{"-s", subnet, "-d", subnet, "-j", "RETURN"}},
		{postroutingChain, c + "masquerades " + subnet, []string{"-s", subnet, "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE"}},
	}
}

// ensureNATLocked makes meshlet's nat rules for the built-in network
// present, once per Manager (that is, per agent start). It needs hostMu. It lists the nat
// table once and writes nothing when all is in place; a network whose
// rules are missing, out of order or for another subnet gets them
// rewritten.
func (m *Manager) ensureNATLocked() error {
	if m.natReady {
		return nil
	}
	if err := m.ensureNAT(); err != nil {
		return fmt.Errorf("failed to ensure meshlet's masquerade rules: %w", err)
	}
	m.natReady = true
	return nil
}

func (m *Manager) ensureNAT() error {
	t, err := m.iptables()
	if err != nil {
		return err
	}
	chains, rules, err := t.list("nat")
	if err != nil {
		return err
	}
	if !chains[postroutingChain] {
		if err := t.ensureChain("nat", postroutingChain); err != nil {
			return err
		}
	}
	var errs []error
	var jumps []rule
	for _, r := range rules {
		if r.chain == jumpRule.chain && r.comment() == jumpRule.comment {
			jumps = append(jumps, r)
		}
	}
	mine := bridgeRules(rules, m.cfg.BridgeName)
	if len(jumps) == 0 {
		errs = append(errs, t.insertFirst(jumpRule))
	}
	for _, dup := range jumps[min(1, len(jumps)):] { // two agents raced
		errs = append(errs, t.deleteRule(dup))
	}
	want := networkRules(m.cfg.BridgeName, m.subnet.String())
	if !sameComments(mine, want) {
		for _, r := range mine {
			errs = append(errs, t.deleteRule(r))
		}
		for _, w := range want {
			errs = append(errs, t.appendRule(w))
		}
	}
	return errors.Join(errs...)
}

// sameComments reports whether have are exactly want, in order.
func sameComments(have []rule, want []natRule) bool {
	return slices.EqualFunc(have, want, func(h rule, w natRule) bool { return h.comment() == w.comment })
}

// ensureChain creates a chain; one that already exists (another process
// won the race) is fine.
func (t *ipt) ensureChain(table, chain string) error {
	if err := t.h.NewChain(table, chain); err != nil {
		if exists, cerr := t.h.ChainExists(table, chain); cerr == nil && exists {
			return nil
		}
		return fmt.Errorf("failed to create iptables chain %s/%s: %w", table, chain, err)
	}
	return nil
}

func (t *ipt) insertFirst(r natRule) error {
	if err := t.h.Insert("nat", r.chain, 1, r.args()...); err != nil {
		return fmt.Errorf("failed to add iptables rule to nat/%s: %w", r.chain, err)
	}
	return nil
}

func (t *ipt) appendRule(r natRule) error {
	if err := t.h.Append("nat", r.chain, r.args()...); err != nil {
		return fmt.Errorf("failed to add iptables rule to nat/%s: %w", r.chain, err)
	}
	return nil
}

// routeLocalnet lets 127.0.0.1 connections to host ports be routed onto
// the bridge (what portmap does when its snat is on), when the plan maps
// ports on the built-in network. The bridge exists once ADD has run.
func (m *Manager) routeLocalnet(p *plan) error {
	if !m.isBuiltin(p.list) || len(p.rt.CapabilityArgs) == 0 {
		return nil
	}
	path := filepath.Join("/proc/sys/net/ipv4/conf", m.cfg.BridgeName, "route_localnet")
	if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("failed to enable route_localnet on %s: %w", m.cfg.BridgeName, err)
	}
	return nil
}

// RemoveBridgeNAT deletes the masquerade rules meshlet keeps for the
// network on bridge (Config.BridgeName), for decommissioning a
// network or cleaning up after a test agent; the agent never calls it.
// Allocations of that network still running lose outbound NAT and host
// ports through 127.0.0.1. The shared chain and its jump stay. A network
// without rules, or a host without iptables, is not an error.
func RemoveBridgeNAT(bridge string) error {
	hostMu.Lock()
	defer hostMu.Unlock()
	path, err := exec.LookPath("iptables")
	if err != nil {
		return nil // without iptables no rule was written
	}
	t, err := newIPT(path)
	if err != nil {
		return err
	}
	_, rules, err := t.list("nat")
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range bridgeRules(rules, bridge) {
		errs = append(errs, t.deleteRule(r))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to remove masquerade rules of bridge %s: %w", bridge, err)
	}
	return nil
}
