package cni

import (
	"context"
	"errors"
	"fmt"
	"net"

	cniutils "github.com/containernetworking/cni/pkg/utils"
)

// GC removes what this Manager's allocations left behind for which live
// (called with an allocation ID) returns false: namespaces it has a record of, libcni
// cache entries, leases of the built-in network, iptables rules and
// chains tagged with the built-in network's name and a dead ID, and
// CNI-FORWARD rules for addresses of the subnet that nobody holds a lease
// of. It keeps going after errors and returns them all. It takes each dead
// allocation's lock while removing it, and asks live again once it holds
// it, so it may run while allocations are placed, set up, restored or torn
// down.
func (m *Manager) GC(ctx context.Context, live func(allocID string) bool) error {
	found := map[string]bool{} // IDs something is left of
	var errs []error
	if atts, err := m.cni.GetCachedAttachments(""); err == nil {
		for _, a := range atts {
			found[a.ContainerID] = true
		}
	}
	ids, err := m.records()
	errs = append(errs, err)
	for _, id := range ids {
		found[id] = true
	}
	leases, err := m.leases()
	errs = append(errs, err)
	for _, l := range leases {
		found[l.id] = true
	}
	t, terr := m.iptables()
	if terr == nil {
		_, rules, err := t.list("nat")
		errs = append(errs, err)
		for _, r := range rules {
			if network, id, ok := r.tagOf(); ok && network == m.cfg.NetworkName && id != "" {
				found[id] = true
			}
		}
	}
	for id := range found {
		// An ID that cannot name a namespace (an empty lease file left by
		// a crash) must never reach teardown: NetNSPath("") is NetNSDir.
		if !live(id) && cniutils.ValidateContainerID(id) == nil {
			errs = append(errs, m.collect(ctx, id, live))
		}
	}
	// Such leases are junk: host-local writes a lease under its lock, which
	// releaseLeases holds, so an unreadable one is not being written.
	errs = append(errs, m.releaseLeases(func(id string) bool { return cniutils.ValidateContainerID(id) != nil }))
	if terr == nil {
		errs = append(errs, m.sweepUnleased(t))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to garbage-collect allocation networks: %w", err)
	}
	return nil
}

// collect removes everything of one dead allocation, holding its lock,
// unless live says it came alive while the lock was awaited. Its teardown
// gets at most m.cleanupTimeout, so a plugin hanging on one allocation's DEL
// does not keep GC from the others.
func (m *Manager) collect(ctx context.Context, allocID string, live func(string) bool) error {
	unlock, err := m.lockAlloc(ctx, allocID)
	if err != nil {
		return fmt.Errorf("allocation %s: %w", allocID, err)
	}
	defer unlock()
	if live(allocID) {
		return nil
	}
	m.logger.Info("removing leaked allocation network", "alloc_id", allocID)
	ctx, cancel := context.WithTimeout(ctx, m.cleanupTimeout)
	defer cancel()
	if err := m.teardownLocked(ctx, allocID, nil); err != nil {
		return fmt.Errorf("allocation %s: %w", allocID, err)
	}
	return nil
}

// sweepUnleased deletes the CNI-FORWARD rules of the subnet's addresses
// that no allocation holds a lease of. The leases are read after the rules
// are listed: host-local leases an address before the firewall plugin
// adds its rules, so an allocation being set up meanwhile is seen holding
// its address.
func (m *Manager) sweepUnleased(t *ipt) error {
	hostMu.Lock()
	defer hostMu.Unlock()
	var leased map[string]bool
	var lerr error
	err := m.sweepForward(t, func(ip string) bool {
		if leased == nil {
			leased = map[string]bool{}
			var all []lease
			all, lerr = m.leases()
			for _, l := range all {
				leased[l.ip] = true
			}
		}
		addr := net.ParseIP(ip)
		return lerr == nil && addr != nil && m.subnet.Contains(addr) && !leased[ip]
	})
	return errors.Join(err, lerr)
}
