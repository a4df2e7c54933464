package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniutils "github.com/containernetworking/cni/pkg/utils"
	"github.com/meshlet/meshlet/structs"
)

// addAttempts is how many times Setup tries CNI ADD.
const addAttempts = 3

// defaultCleanupTimeout bounds the undoing of what a failed operation
// created (the DEL of a rollback, of a partial ADD, of one dead allocation
// in GC): it runs on after the operation's context ended, so it needs a
// limit of its own, or a plugin hanging on DEL would hold the allocation's
// lock, an operation slot and the caller forever.
const defaultCleanupTimeout = time.Minute

// cleanupContext returns the context of a cleanup after an operation on
// ctx: it keeps ctx's values, not its cancellation, and ends after
// m.cleanupTimeout.
func (m *Manager) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.cleanupTimeout)
}

// ModeOf returns the network mode of the allocation's group: the mode of
// its first network, "host" if it has none.
func ModeOf(alloc *structs.Allocation) string {
	if nw := groupNetwork(alloc); nw != nil && nw.Mode != "" {
		return nw.Mode
	}
	return structs.NetworkModeHost
}

func groupNetwork(alloc *structs.Allocation) *structs.NetworkResource {
	if alloc == nil || alloc.Job == nil {
		return nil
	}
	tg := alloc.Job.LookupTaskGroup(alloc.TaskGroup)
	if tg == nil || len(tg.Networks) == 0 {
		return nil
	}
	return tg.Networks[0]
}

// plan is what Setup and Restore need for one allocation.
type plan struct {
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
}

// prepare resolves the allocation's network and checks, without changing
// anything, that it can be set up. A nil plan means nothing to do.
func (m *Manager) prepare(alloc *structs.Allocation) (*plan, error) {
	if alloc == nil {
		return nil, newError(ErrInvalidAllocation, "allocation is nil", nil)
	}
	mode := ModeOf(alloc)
	if mode == structs.NetworkModeHost || mode == structs.NetworkModeNone {
		return nil, nil
	}
	if cniutils.ValidateContainerID(alloc.ID) != nil {
		return nil, newError(ErrInvalidAllocation, fmt.Sprintf("allocation ID %q cannot name a namespace (want letters, digits, '-', '_', '.')", alloc.ID), nil)
	}
	list, err := m.networkFor(mode)
	if err != nil {
		return nil, err
	}
	if err := checkPlugins(list, m.cfg.PluginDir); err != nil {
		return nil, err
	}
	if list == m.builtin {
		if _, err := m.lookPath("iptables"); err != nil {
			return nil, iptablesMissingError(err)
		}
	}
	rt, err := m.runtimeConf(alloc)
	if err != nil {
		return nil, err
	}
	if list == m.builtin && len(rt.CapabilityArgs) == 0 {
		list = m.noPorts
	}
	return &plan{list: list, rt: rt}, nil
}

// isBuiltin reports whether list is one of the "bridge" mode's lists.
func (m *Manager) isBuiltin(list *libcni.NetworkConfigList) bool {
	return list == m.builtin || list == m.noPorts
}

// networkFor returns the conflist of a bridge or cni/<name> mode.
func (m *Manager) networkFor(mode string) (*libcni.NetworkConfigList, error) {
	switch {
	case mode == structs.NetworkModeBridge:
		return m.builtin, nil
	case strings.HasPrefix(mode, structs.NetworkModeCNIPrefix):
		return loadNamedConfList(m.cfg.ConfigDir, strings.TrimPrefix(mode, structs.NetworkModeCNIPrefix))
	}
	return nil, newError(ErrUnsupportedMode, fmt.Sprintf("network mode %q is not supported: use host, none, bridge or cni/<name>", mode), nil)
}

// Setup creates the allocation's namespace and attaches it to the
// network of its group's mode. For "host" and "none" it does nothing and
// returns nil, nil. If the namespace already exists (an agent restarted
// mid-setup) it behaves like Restore. On failure nothing is left behind
// and the error says what to fix. Setups of different allocations
// run in parallel; calls for one allocation wait for each other (or for
// ctx).
func (m *Manager) Setup(ctx context.Context, alloc *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	p, err := m.prepare(alloc)
	if err != nil || p == nil {
		return nil, wrapSetup(alloc, err)
	}
	unlock, err := m.lockAlloc(ctx, alloc.ID)
	if err != nil {
		return nil, wrapSetup(alloc, err)
	}
	defer unlock()
	if netNSExists(m.NetNSPath(alloc.ID)) {
		return m.restoreLocked(ctx, alloc, p)
	}
	if err := m.ensureHost(p); err != nil {
		return nil, wrapSetup(alloc, err)
	}
	status, err := m.setupLocked(ctx, alloc, p)
	return status, wrapSetup(alloc, err)
}

// ensureHost prepares the host-wide state a plan's network relies on
// before its ADD: NetNSDir as a shared mount and, for the built-in
// network, meshlet's nat rules. It holds hostMu.
func (m *Manager) ensureHost(p *plan) error {
	hostMu.Lock()
	defer hostMu.Unlock()
	if err := m.ensureSharedDir(); err != nil {
		return classify(err, p.list.Name, m.cfg.Subnet)
	}
	if !m.isBuiltin(p.list) {
		return nil
	}
	return m.ensureNATLocked()
}

func wrapSetup(alloc *structs.Allocation, err error) error {
	if err == nil {
		return nil
	}
	if alloc == nil {
		return fmt.Errorf("failed to set up allocation network: %w", err)
	}
	return fmt.Errorf("failed to set up network for allocation %s: %w", alloc.ID, err)
}

// setupLocked creates the record and the namespace and runs ADD; on
// failure it undoes everything, a half-written record included. An undo
// that does not finish within the cleanup timeout is reported with the error;
// it keeps the record, so GC finishes it.
func (m *Manager) setupLocked(ctx context.Context, alloc *structs.Allocation, p *plan) (*structs.AllocNetworkStatus, error) {
	if err := m.writeRecord(alloc.ID, p.list.Name); err != nil {
		if rerr := m.removeRecord(alloc.ID); rerr != nil {
			return nil, fmt.Errorf("%w (and cleaning up failed: %w)", err, rerr)
		}
		return nil, err
	}
	if err := createNetNS(m.NetNSPath(alloc.ID)); err != nil {
		_ = m.removeRecord(alloc.ID)
		return nil, classify(err, p.list.Name, m.cfg.Subnet)
	}
	res, err := m.addWithRetry(ctx, alloc.ID, p)
	var status *structs.AllocNetworkStatus
	if err == nil {
		status, err = m.afterAdd(res, alloc, p)
	}
	if err != nil {
		cctx, cancel := m.cleanupContext(ctx)
		defer cancel()
		if uerr := m.teardownLocked(cctx, alloc.ID, &attachment{list: p.list, rt: p.rt}); uerr != nil {
			return nil, fmt.Errorf("%w (and cleaning up failed: %w)", err, uerr)
		}
		return nil, err
	}
	m.logger.Debug("allocation network set up", "alloc_id", alloc.ID, "network", p.list.Name, "address", status.Address)
	return status, nil
}

// addWithRetry runs ADD up to addAttempts times, cleaning partial state
// between attempts, and returns the first error. It stops retrying when
// that cleaning does not finish.
func (m *Manager) addWithRetry(ctx context.Context, allocID string, p *plan) (types.Result, error) {
	var first error
	for attempt := 1; attempt <= addAttempts; attempt++ {
		if attempt > 1 {
			if !m.undoAddBounded(ctx, allocID, p) {
				return nil, first
			}
			select {
			case <-ctx.Done():
				return nil, first
			case <-time.After(m.retryDelay(attempt)):
			}
		}
		res, err := m.add(ctx, p)
		if err == nil {
			return res, nil
		}
		err = classify(err, p.list.Name, m.cfg.Subnet)
		if first == nil {
			first = err
		}
		if permanent(err) || ctx.Err() != nil || attempt == addAttempts {
			break
		}
		m.logger.Warn("CNI ADD failed; retrying", "alloc_id", allocID, "attempt", attempt, "error", err)
	}
	return nil, first
}

// add runs CNI ADD of the plan. The first ADD of a network by this
// Manager holds firstAddLock (see locks.go).
func (m *Manager) add(ctx context.Context, p *plan) (types.Result, error) {
	// The lists with and without portmap each go alone once: the first
	// ADD with portmap creates its top-level chains.
	key := fmt.Sprintf("%s/%d", p.list.Name, len(p.list.Plugins))
	if m.addedOnce(key, false) {
		return m.cni.AddNetworkList(ctx, p.list, p.rt)
	}
	unlock, err := firstAddLock.lock(ctx, "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	res, err := m.cni.AddNetworkList(ctx, p.list, p.rt)
	if err == nil {
		m.addedOnce(key, true)
	}
	return res, err
}

// addedOnce reports whether an ADD of network succeeded before; set
// records that one did.
func (m *Manager) addedOnce(network string, set bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if set {
		m.added[network] = true
	}
	return m.added[network]
}

// afterAdd completes a successful ADD of the plan: route_localnet for
// its host ports, then the status from the result.
func (m *Manager) afterAdd(res types.Result, alloc *structs.Allocation, p *plan) (*structs.AllocNetworkStatus, error) {
	if err := m.routeLocalnet(p); err != nil {
		return nil, err
	}
	return statusOf(res, groupNetwork(alloc))
}

// undoAdd removes a partial ADD but keeps the namespace for the next
// try. It returns false if DEL did not finish (ctx ended): then nothing
// else was removed.
func (m *Manager) undoAdd(ctx context.Context, allocID string, p *plan) bool {
	delErr, err := m.detachLocked(ctx, allocID, &attachment{list: p.list, rt: p.rt})
	if delErr != nil || err != nil {
		m.logger.Debug("undoing a partial CNI ADD failed", "alloc_id", allocID, "error", errors.Join(delErr, err))
	}
	return delErr == nil || ctx.Err() == nil
}

// undoAddBounded is undoAdd after an ADD on ctx failed, on a cleanup
// context.
func (m *Manager) undoAddBounded(ctx context.Context, allocID string, p *plan) bool {
	cctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	return m.undoAdd(cctx, allocID, p)
}

// sweep removes what the plugins may have left of allocID in iptables
// after a DEL that failed or ran without the cached config: rules and
// chains tagged with the ID, and CNI-FORWARD rules for its addresses (ips
// and those DEL saw). A missing iptables is only an error if DEL failed
// too: without iptables no plugin can have written a rule.
func (m *Manager) sweep(allocID string, d delResult, ips []string) error {
	err := m.sweepIptables(map[string]bool{allocID: true}, append(d.networks, m.cfg.NetworkName), toSet(append(ips, d.ips...)))
	if err != nil && d.err == nil && errors.Is(err, ErrIptablesMissing) {
		return nil
	}
	return err
}

// statusOf extracts the IPv4 address of eth0 from an ADD result.
func statusOf(res types.Result, nw *structs.NetworkResource) (*structs.AllocNetworkStatus, error) {
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("failed to parse CNI result: %w", err)
	}
	for _, ip := range cur.IPs {
		if ip.Address.IP.To4() == nil {
			continue
		}
		if ip.Interface != nil && *ip.Interface >= 0 && *ip.Interface < len(cur.Interfaces) {
			iface := cur.Interfaces[*ip.Interface]
			if iface.Name != ifName || iface.Sandbox == "" {
				continue
			}
		}
		status := &structs.AllocNetworkStatus{InterfaceName: ifName, Address: ip.Address.IP.String()}
		if nw != nil && nw.DNS != nil {
			dns := *nw.DNS
			status.DNS = &dns
		}
		return status, nil
	}
	return nil, newError(ErrPluginFailed, fmt.Sprintf("CNI result has no IPv4 address on %s", ifName), nil)
}

// leaseIPs returns the built-in network's addresses leased to allocID.
func (m *Manager) leaseIPs(allocID string) []string {
	all, _ := m.leases()
	var ips []string
	for _, l := range all {
		if l.id == allocID {
			ips = append(ips, l.ip)
		}
	}
	return ips
}

func toSet(ss []string) map[string]bool {
	set := make(map[string]bool, len(ss))
	for _, s := range ss {
		set[s] = true
	}
	return set
}

// Teardown runs CNI DEL (with the config and arguments cached at ADD),
// then removes the namespace. If DEL fails, the iptables rules and chains
// tagged with the allocation ID are removed directly; the lease is always
// released. Tearing down an allocation with nothing set up returns nil.
// It waits for other calls on the same allocation (or for ctx), never for
// other allocations.
func (m *Manager) Teardown(ctx context.Context, alloc *structs.Allocation) error {
	if alloc == nil || alloc.ID == "" || cniutils.ValidateContainerID(alloc.ID) != nil {
		return nil // nothing this package could have created
	}
	unlock, err := m.lockAlloc(ctx, alloc.ID)
	if err != nil {
		return fmt.Errorf("failed to tear down network of allocation %s: %w", alloc.ID, err)
	}
	defer unlock()
	if !m.hasState(alloc.ID) {
		return nil
	}
	if err := m.teardownLocked(ctx, alloc.ID, m.fallbackFor(alloc)); err != nil {
		return fmt.Errorf("failed to tear down network of allocation %s: %w", alloc.ID, err)
	}
	return nil
}

// fallbackFor returns what DEL uses when nothing is cached: the current
// config of the allocation's mode, or nil.
func (m *Manager) fallbackFor(alloc *structs.Allocation) *attachment {
	mode := ModeOf(alloc)
	if mode == structs.NetworkModeHost || mode == structs.NetworkModeNone {
		return nil
	}
	list, err := m.networkFor(mode)
	if err != nil {
		return nil
	}
	rt, err := m.runtimeConf(alloc)
	if err != nil {
		return nil
	}
	return &attachment{list: list, rt: rt}
}

// hasState reports whether anything of allocID is on disk: a CNI cache
// entry, a namespace record or file, or a lease.
func (m *Manager) hasState(allocID string) bool {
	if atts, _ := m.cni.GetCachedAttachments(allocID); len(atts) > 0 {
		return true
	}
	if _, err := os.Lstat(m.recordPath(allocID)); err == nil {
		return true
	}
	if _, err := os.Lstat(m.NetNSPath(allocID)); err == nil {
		return true
	}
	return len(m.leaseIPs(allocID)) > 0
}

// detachLocked undoes allocID's ADDs but keeps its namespace: CNI DEL,
// then what afterDel removes. A DEL cut short because ctx ended leaves
// everything else as it is (the cached config included, for the next
// DEL): the namespace stays in use, and a sweep or a released lease would
// take the network from under tasks the DEL may not have detached. It
// returns the DEL error apart from the errors of the cleanup after it.
func (m *Manager) detachLocked(ctx context.Context, allocID string, fallback *attachment) (delErr, err error) {
	ips := m.leaseIPs(allocID)
	d := m.delNetworks(ctx, allocID, fallback)
	if cutShort(ctx, d) {
		return d.err, nil
	}
	return d.err, m.afterDel(allocID, d, ips)
}

// cutShort reports whether DEL failed because ctx ended.
func cutShort(ctx context.Context, d delResult) bool {
	return d.err != nil && ctx.Err() != nil
}

// afterDel removes what a DEL of allocID (with the leased addresses ips
// before it) may have left: iptables leftovers (swept only when DEL failed
// or had no cached config: a clean DEL has removed the plugins' rules
// itself), leases and cache.
func (m *Manager) afterDel(allocID string, d delResult, ips []string) error {
	var errs []error
	if !d.clean {
		errs = append(errs, m.sweep(allocID, d, ips))
	}
	errs = append(errs,
		m.releaseLeases(func(id string) bool { return id == allocID }),
		m.removeCache(allocID),
	)
	return errors.Join(errs...)
}

// teardownLocked removes everything of allocID: DEL and what afterDel
// removes, then the namespace and, last, its record. The record is GC's
// only marker of a namespace, so it goes only once everything before it
// is gone: if anything failed it stays, and GC (or the next Teardown,
// which does not return early while it exists) tries again.
//
// A DEL that ctx cuts short is an error: the allocation's iptables rules
// are swept and its namespace removed, but its lease and cached config
// stay (with the record) for a DEL that finishes. Released now, the
// address could go to another allocation whose firewall rules that DEL
// would then delete.
func (m *Manager) teardownLocked(ctx context.Context, allocID string, fallback *attachment) error {
	ips := m.leaseIPs(allocID)
	d := m.delNetworks(ctx, allocID, fallback)
	delErr, err := d.err, error(nil)
	if cutShort(ctx, d) {
		err = errors.Join(m.sweep(allocID, d, ips),
			fmt.Errorf("CNI DEL did not finish (%w); its lease and cached config are kept for the next DEL", ctx.Err()))
	} else {
		err = m.afterDel(allocID, d, ips)
	}
	err = errors.Join(err,
		deleteLinks(m.NetNSPath(allocID)),
		removeNetNS(m.NetNSPath(allocID)),
	)
	if err == nil {
		err = m.removeRecord(allocID)
	} else {
		err = fmt.Errorf("%w (the namespace record is kept so the garbage collection finishes it)", err)
	}
	switch {
	case err != nil && delErr != nil:
		return fmt.Errorf("%w (after CNI DEL failed: %w)", err, delErr)
	case err != nil:
		return err
	case delErr != nil:
		m.logger.Warn("CNI DEL failed; removed the allocation's iptables rules, lease and namespace directly",
			"alloc_id", allocID, "error", delErr)
	}
	return nil
}
