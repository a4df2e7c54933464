package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// GC removes what this Manager's allocations left behind that are not in
// live (keyed by allocation ID): namespaces it has a record of, libcni
// cache entries, leases of the built-in network, iptables rules and
// chains tagged with the built-in network's name and a dead ID, and
// CNI-FORWARD rules for addresses of the subnet no live allocation holds.
// It keeps going after errors and returns them all.
func (m *Manager) GC(ctx context.Context, live map[string]bool) error {
	mu.Lock()
	defer mu.Unlock()
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
		if live[id] {
			continue
		}
		m.logger.Info("removing leaked allocation network", "alloc_id", id)
		errs = append(errs, m.teardownLocked(ctx, id, nil))
	}
	if terr == nil {
		liveIPs := map[string]bool{}
		for _, l := range leases {
			if live[l.id] {
				liveIPs[l.ip] = true
			}
		}
		errs = append(errs, m.sweepForward(t, func(ip string) bool {
			addr := net.ParseIP(ip)
			return addr != nil && m.subnet.Contains(addr) && !liveIPs[ip]
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to garbage-collect allocation networks: %w", err)
	}
	return nil
}
