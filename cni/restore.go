package cni

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/meshlet/meshlet/structs"
)

// Restore re-adopts an allocation's network after an agent restart. If
// its namespace still exists it is reused (tasks may be running in it) and
// checked with CNI CHECK against the cached ADD; if the check finds a
// problem the network inside the same namespace is rebuilt once (DEL,
// then ADD). A check that does not run to its end (ctx ends, a plugin
// cannot be run or crashes) keeps the network as it is and returns the
// error, as does a rebuild whose DEL ctx cuts short. A namespace record
// that cannot be written (a full disk) is logged, never fatal: the
// running network is kept.
//
// If the namespace is gone (e.g. after a reboot) leftovers are removed
// and the network is set up afresh in a new namespace at the same path;
// Restore then returns the new network's status together with an error
// wrapping ErrNamespaceLost: whatever ran in the old namespace has no
// network and must be restarted (or the allocation replaced). If that
// setup fails the status is nil and the error does not wrap
// ErrNamespaceLost.
//
// "host" and "none" return nil, nil. Restore waits for other calls on the
// same allocation (or for ctx), never for other allocations.
func (m *Manager) Restore(ctx context.Context, alloc *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	p, err := m.prepare(alloc)
	if err != nil || p == nil {
		return nil, wrapRestore(alloc, err)
	}
	unlock, err := m.lockAlloc(ctx, alloc.ID)
	if err != nil {
		return nil, wrapRestore(alloc, err)
	}
	defer unlock()
	return m.restoreLocked(ctx, alloc, p)
}

func wrapRestore(alloc *structs.Allocation, err error) error {
	if err == nil {
		return nil
	}
	if alloc == nil {
		return fmt.Errorf("failed to restore allocation network: %w", err)
	}
	return fmt.Errorf("failed to restore network of allocation %s: %w", alloc.ID, err)
}

func (m *Manager) restoreLocked(ctx context.Context, alloc *structs.Allocation, p *plan) (*structs.AllocNetworkStatus, error) {
	if err := m.ensureHost(p); err != nil {
		return nil, wrapRestore(alloc, err)
	}
	if !netNSExists(m.NetNSPath(alloc.ID)) {
		return m.recreate(ctx, alloc, p)
	}
	if err := m.ensureRecord(alloc.ID, p.list.Name); err != nil {
		m.logger.Warn("cannot write the namespace record; keeping the running network (written again at the next restore)",
			"alloc_id", alloc.ID, "error", err)
	}
	status, err := m.checkCached(ctx, alloc)
	if err == nil {
		m.logger.Debug("allocation network restored", "alloc_id", alloc.ID, "address", status.Address)
		return status, nil
	}
	if inconclusive(ctx, err) {
		// Tasks may be using the network: only a check that found a
		// problem justifies taking it down to rebuild it.
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, wrapRestore(alloc, fmt.Errorf("could not check the allocation's network, kept as it is: %w", err))
	}
	return m.rebuildLocked(ctx, alloc, p, err)
}

// inconclusive reports whether a failed CHECK says nothing about the
// network: ctx ended (the plugin was killed), or a plugin could not be run
// or died without the CNI error a plugin reports a problem with (a
// missing binary, a crash).
func inconclusive(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		return cniErr.Code == 0 // libcni's wrapping of an exec failure: no code from the plugin
	}
	return strings.Contains(err.Error(), "failed to find plugin")
}

// rebuildLocked runs DEL then ADD in the allocation's namespace, after
// its network failed a check with checkErr. If ctx ends during the DEL,
// nothing more is done. The built-in network keeps the address the tasks
// use (unless another allocation took it meanwhile).
func (m *Manager) rebuildLocked(ctx context.Context, alloc *structs.Allocation, p *plan, checkErr error) (*structs.AllocNetworkStatus, error) {
	m.logger.Warn("allocation network failed its check; rebuilding it once", "alloc_id", alloc.ID, "error", checkErr)
	keep := m.keepingAddress(alloc.ID, p)
	m.undoAdd(ctx, alloc.ID, p)
	if ctx.Err() != nil {
		return nil, wrapRestore(alloc, fmt.Errorf("rebuilding the network after a failed check (%w) stopped: %w", checkErr, ctx.Err()))
	}
	res, err := m.add(ctx, keep)
	if err != nil && keep != p && ctx.Err() == nil && m.undoAddBounded(ctx, alloc.ID, p) {
		m.logger.Warn("cannot keep the allocation's address; rebuilding its network on another", "alloc_id", alloc.ID, "error", err)
		res, err = m.add(ctx, p)
	}
	var status *structs.AllocNetworkStatus
	if err == nil {
		status, err = m.afterAdd(res, alloc, p)
	}
	if err != nil {
		// Keep the namespace (tasks may live in it); Teardown removes it.
		m.undoAddBounded(ctx, alloc.ID, p)
		return nil, wrapRestore(alloc, classify(err, p.list.Name, m.cfg.Subnet))
	}
	return status, nil
}

// keepingAddress returns p asking for the address allocID holds now, if
// p is the built-in network's: its IPAM, host-local, takes the address
// to give from CNI_ARGS "IP". Other networks' IPAM may not, so they get
// p and the address their IPAM gives.
func (m *Manager) keepingAddress(allocID string, p *plan) *plan {
	ips := m.leaseIPs(allocID)
	if !m.isBuiltin(p.list) || len(ips) != 1 {
		return p
	}
	rt := *p.rt
	rt.Args = append(slices.Clone(p.rt.Args), [2]string{"IP", ips[0]})
	return &plan{list: p.list, rt: &rt}
}

// recreate sets up the network of an allocation whose namespace is gone,
// after removing what is left of the old one, and reports the loss.
func (m *Manager) recreate(ctx context.Context, alloc *structs.Allocation, p *plan) (*structs.AllocNetworkStatus, error) {
	path := m.NetNSPath(alloc.ID)
	m.logger.Warn("allocation namespace is gone; setting its network up in a new one (tasks of the old one must be restarted)",
		"alloc_id", alloc.ID, "netns", path)
	if err := m.teardownLocked(ctx, alloc.ID, &attachment{list: p.list, rt: p.rt}); err != nil {
		return nil, wrapRestore(alloc, err)
	}
	status, err := m.setupLocked(ctx, alloc, p)
	if err != nil {
		return nil, wrapRestore(alloc, err)
	}
	return status, fmt.Errorf("network namespace of allocation %s was lost and set up again at %s (address %s): %w",
		alloc.ID, path, status.Address, ErrNamespaceLost)
}

// errNotCached: there is no cached ADD to check.
var errNotCached = errors.New("no cached CNI result for the allocation")

// checkCached runs CNI CHECK with the config and result cached at ADD and
// returns the status recorded then. A conflist older than CHECK (cniVersion
// before 0.4.0) gets a check of its own instead: eth0 is in the namespace
// with the cached address.
func (m *Manager) checkCached(ctx context.Context, alloc *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	for _, a := range m.cachedAttachments(alloc.ID) {
		if a.rt.IfName != ifName {
			continue
		}
		res, err := m.cni.GetNetworkListCachedResult(a.list, a.rt)
		if err != nil || res == nil {
			return nil, errNotCached
		}
		checkErr := m.cni.CheckNetworkList(ctx, a.list, a.rt)
		if checkErr != nil && !errors.Is(checkErr, libcni.ErrorCheckNotSupp) {
			return nil, fmt.Errorf("failed to check CNI network %q: %w", a.list.Name, checkErr)
		}
		status, err := statusOf(res, groupNetwork(alloc))
		if err != nil || checkErr == nil {
			return status, err
		}
		if err := hasAddress(m.NetNSPath(alloc.ID), ifName, status.Address); err != nil {
			return nil, fmt.Errorf("CNI network %q (cniVersion %s, which has no CHECK) is not in place: %w", a.list.Name, a.list.CNIVersion, err)
		}
		return status, nil
	}
	return nil, errNotCached
}
