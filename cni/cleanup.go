package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/utils"
	"golang.org/x/sys/unix"
)

// sharedChains are created by the plugins for every container and must
// never be deleted by a per-allocation cleanup.
var sharedChains = map[string]bool{
	"CNI-HOSTPORT-DNAT": true, "CNI-HOSTPORT-SETMARK": true, "CNI-HOSTPORT-MASQ": true,
	"CNI-HOSTPORT-SNAT": true, "CNI-FORWARD": true,
}

// attachment is one cached CNI ADD of an allocation.
type attachment struct {
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
}

// cachedAttachments returns the allocation's attachments that libcni
// cached at ADD time (config and runtime arguments as used then).
func (m *Manager) cachedAttachments(allocID string) []attachment {
	atts, err := m.cni.GetCachedAttachments(allocID)
	if err != nil {
		m.logger.Warn("cannot read the CNI cache; falling back to the current config", "alloc_id", allocID, "error", err)
		return nil
	}
	var out []attachment
	for _, a := range atts {
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			m.logger.Warn("ignoring unreadable cached CNI config", "alloc_id", allocID, "error", err)
			continue
		}
		out = append(out, attachment{list: list, rt: &libcni.RuntimeConf{
			ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName,
			Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs,
		}})
	}
	return out
}

// cachedIPs returns the addresses recorded in an attachment's cached result.
func (m *Manager) cachedIPs(a attachment) []string {
	res, err := m.cni.GetNetworkListCachedResult(a.list, a.rt)
	if err != nil || res == nil {
		return nil
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		return nil
	}
	var ips []string
	for _, ip := range cur.IPs {
		ips = append(ips, ip.Address.IP.String())
	}
	return ips
}

// delResult is what delNetworks learned: the networks and addresses
// involved (collected before DEL), the DEL errors, and whether every DEL
// ran with the config cached at ADD and succeeded (then the plugins have
// removed their rules themselves and no sweep is needed).
type delResult struct {
	networks, ips []string
	err           error
	clean         bool
}

// delNetworks runs CNI DEL for every cached attachment of allocID, or for
// fallback when nothing is cached. A failed DEL is followed by a DEL of
// each plugin alone, so one broken plugin does not stop the others.
func (m *Manager) delNetworks(ctx context.Context, allocID string, fallback *attachment) delResult {
	atts := m.cachedAttachments(allocID)
	cached := len(atts) > 0
	if !cached && fallback != nil {
		atts = []attachment{*fallback}
	}
	var networks, ips []string
	var errs []error
	for _, a := range atts {
		networks = append(networks, a.list.Name)
		ips = append(ips, m.cachedIPs(a)...)
		if derr := m.cni.DelNetworkList(ctx, a.list, a.rt); derr != nil {
			errs = append(errs, classify(derr, a.list.Name, m.cfg.Subnet))
			if ctx.Err() == nil {
				m.delEachPlugin(ctx, a)
			}
		}
	}
	err := errors.Join(errs...)
	return delResult{networks: networks, ips: ips, err: err, clean: cached && err == nil}
}

// delEachPlugin runs DEL on each plugin of a list alone, in reverse order,
// ignoring failures: the iptables sweep and lease release that follow are
// the backstop.
func (m *Manager) delEachPlugin(ctx context.Context, a attachment) {
	for i := len(a.list.Plugins) - 1; i >= 0; i-- {
		p, err := libcni.InjectConf(a.list.Plugins[i], map[string]any{"name": a.list.Name, "cniVersion": a.list.CNIVersion})
		if err != nil {
			continue
		}
		if err := m.cni.DelNetwork(ctx, p, a.rt); err != nil {
			m.logger.Debug("CNI DEL of one plugin failed", "alloc_id", a.rt.ContainerID, "plugin", p.Network.Type, "error", err)
		}
	}
}

// removeCache deletes libcni's cache entries of allocID (left behind when
// DEL failed).
func (m *Manager) removeCache(allocID string) error {
	dir := filepath.Join(cacheDir(m.cfg), "results")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		if strings.Contains(e.Name(), "-"+allocID+"-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("failed to remove CNI cache entry: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// sweepIptables removes what the plugins left in iptables for the given
// container IDs: nat rules whose comment carries one of the IDs (bridge
// ipMasq, portmap), the per-container chains they jump to or that are named
// after (network, ID), and CNI-FORWARD rules (firewall) for ips. It holds
// hostMu.
func (m *Manager) sweepIptables(ids map[string]bool, networks []string, ips map[string]bool) error {
	hostMu.Lock()
	defer hostMu.Unlock()
	t, err := m.iptables()
	if err != nil {
		return err
	}
	chains, rules, err := t.list("nat")
	if err != nil {
		return err
	}
	doomed := map[string]bool{}
	for _, r := range rules {
		if _, id, ok := r.tagOf(); ok && ids[id] {
			if tgt := r.target(); strings.HasPrefix(tgt, "CNI-") && !sharedChains[tgt] {
				doomed[tgt] = true
			}
		}
	}
	for id := range ids {
		for _, n := range networks {
			doomed[utils.FormatChainName(n, id)] = true
			doomed[utils.MustFormatChainNameWithPrefix(n, id, "DN-")] = true
		}
	}
	var errs []error
	for _, r := range rules {
		if _, id, ok := r.tagOf(); ok && ids[id] && !doomed[r.chain] {
			errs = append(errs, t.deleteRule(r))
		}
	}
	for c := range doomed {
		if chains[c] {
			errs = append(errs, t.deleteChain("nat", c))
		}
	}
	if len(ips) > 0 {
		errs = append(errs, m.sweepForward(t, func(ip string) bool { return ips[ip] }))
	}
	return errors.Join(errs...)
}

// sweepForward deletes the firewall plugin's CNI-FORWARD rules whose
// source or destination address satisfies doomed.
func (m *Manager) sweepForward(t *ipt, doomed func(ip string) bool) error {
	lines, err := t.h.List("filter", "CNI-FORWARD")
	if err != nil {
		return nil // no CNI-FORWARD chain: nothing to sweep
	}
	_, rules := parseRules("filter", []byte(strings.Join(lines, "\n")))
	var errs []error
	for _, r := range rules {
		for _, flag := range []string{"-s", "-d"} {
			if ip := strings.TrimSuffix(r.arg(flag), "/32"); ip != "" && doomed(ip) {
				errs = append(errs, t.deleteRule(r))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// lease is one host-local reservation of the built-in network.
type lease struct {
	ip, id, path string
}

// leases lists the built-in network's reservations.
func (m *Manager) leases() ([]lease, error) {
	dir := m.leaseDir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read IPAM leases: %w", err)
	}
	var out []lease
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || name == "lock" || strings.HasPrefix(name, "last_reserved_ip") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\r\n")
		out = append(out, lease{ip: name, id: strings.TrimSpace(id), path: filepath.Join(dir, name)})
	}
	return out, nil
}

// releaseLeases removes the built-in network's leases whose container ID
// satisfies doomed, holding host-local's own lock file meanwhile.
func (m *Manager) releaseLeases(doomed func(id string) bool) error {
	dir := m.leaseDir()
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no lease dir: nothing leased yet
	}
	if err != nil {
		return fmt.Errorf("failed to open IPAM lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("failed to lock IPAM leases: %w", err)
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()
	all, err := m.leases()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range all {
		if doomed(l.id) {
			if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("failed to release IPAM lease %s: %w", l.ip, err))
			}
		}
	}
	return errors.Join(errs...)
}
