package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/structs"
)

// AllocHookContext is what hooks share for one allocation. Hooks run one at
// a time, so they may read and write it without locking.
type AllocHookContext struct {
	// Alloc is the allocation as last received from the server; read only.
	Alloc    *structs.Allocation
	Node     *structs.Node
	AllocDir *allocdir.AllocDir
	// Restored is true when the allocation was found in the client state
	// after an agent restart: hooks re-attach to what exists instead of
	// creating it.
	Restored bool
	// NetNSPath and NetworkStatus are set by the network hook.
	NetNSPath     string
	NetworkStatus *structs.AllocNetworkStatus
	// NetworkRecreated is set by the network hook of a restored
	// allocation whose namespace had to be made again, or whose network
	// was rebuilt on another address: tasks recovered in the old network
	// must be restarted into the new one.
	NetworkRecreated bool
	// Env adds variables to every task's environment (e.g. the sidecar hook's
	// NOMAD_UPSTREAM_ADDR_<name>).
	Env    map[string]string
	Logger hclog.Logger
}

// AllocHook is one step of an allocation's setup. The alloc runner calls
// Prerun on every hook in order (network → sidecar → services) before any
// task starts, Postrun in reverse order once every task is dead (also to
// roll back after a failed Prerun: only hooks whose Prerun succeeded), and
// Destroy in reverse order when the allocation is garbage collected. On an
// agent shutdown none is called: what they set up stays for the next agent.
// Postrun also runs, without a Prerun first, for a restored allocation
// whose tasks all died before the previous agent completed its postrun
// hooks. Postrun and Destroy must be idempotent.
type AllocHook interface {
	Name() string
	Prerun(ctx context.Context, hc *AllocHookContext) error
	Postrun(ctx context.Context, hc *AllocHookContext) error
	Destroy(ctx context.Context, hc *AllocHookContext) error
}

// PreKillHook is implemented by hooks that act before tasks are killed on a
// stop (e.g. deregister services, so traffic drains during shutdown_delay).
type PreKillHook interface {
	PreKill(ctx context.Context, hc *AllocHookContext)
}

// TaskStateHook is implemented by hooks that follow the allocation's
// tasks (the services hook registers a task's own services only while the
// task runs, as Nomad does). Once every Prerun returned (and the
// allocation was not stopped meanwhile), TaskStateChanged is called for
// every task with its state, then after each change of a task's state
// with a copy of the task's state as it is then. The calls are
// serialized among themselves, so the last call for a task carries its
// latest state; they come from the task runners' goroutines, concurrently
// with the hook's other methods (PreKill, Postrun...), and must not block.
type TaskStateHook interface {
	TaskStateChanged(hc *AllocHookContext, task string, state *structs.TaskState)
}

// Networker sets up per-allocation network namespaces; *cni.Manager
// implements it.
type Networker interface {
	Setup(ctx context.Context, alloc *structs.Allocation) (*structs.AllocNetworkStatus, error)
	Restore(ctx context.Context, alloc *structs.Allocation) (*structs.AllocNetworkStatus, error)
	Teardown(ctx context.Context, alloc *structs.Allocation) error
	NetNSPath(allocID string) string
}

// NetworkHook creates (or, after an agent restart, restores) the
// allocation's network namespace for bridge and cni/* modes and tears it
// down in Postrun. Host and none modes need nothing.
type NetworkHook struct {
	net Networker
	// unavailable explains why net is nil (e.g. CNI plugins missing).
	unavailable string
	state       clientstate.Store
}

// NewNetworkHook returns the network hook. net may be nil when bridge
// networking is not available; unavailable then says why, and allocations
// that need it fail with that message.
func NewNetworkHook(net Networker, unavailable string, state clientstate.Store) *NetworkHook {
	return &NetworkHook{net: net, unavailable: unavailable, state: state}
}

// Name implements AllocHook.
func (h *NetworkHook) Name() string { return "network" }

func needsNamespace(alloc *structs.Allocation) bool {
	mode := taskenv.Mode(alloc)
	return mode == structs.NetworkModeBridge || strings.HasPrefix(mode, structs.NetworkModeCNIPrefix)
}

// Prerun implements AllocHook.
func (h *NetworkHook) Prerun(ctx context.Context, hc *AllocHookContext) error {
	if !needsNamespace(hc.Alloc) {
		return nil
	}
	mode := taskenv.Mode(hc.Alloc)
	if h.net == nil {
		return fmt.Errorf("failed to set up network: network mode %q needs CNI networking, which is not available on this node: %s", mode, h.unavailable)
	}
	if hc.Restored {
		return h.restore(ctx, hc, mode)
	}
	st, err := h.net.Setup(ctx, hc.Alloc)
	if err != nil {
		return fmt.Errorf("network mode %q: %w", mode, err)
	}
	return h.attach(hc, st)
}

// attach records the allocation's namespace and status in hc, then
// persists the status (hc is set even when that write fails).
func (h *NetworkHook) attach(hc *AllocHookContext, st *structs.AllocNetworkStatus) error {
	hc.NetNSPath = h.net.NetNSPath(hc.Alloc.ID)
	hc.NetworkStatus = st
	if h.state != nil {
		if err := h.state.PutNetworkStatus(hc.Alloc.ID, st); err != nil {
			return fmt.Errorf("failed to persist network status: %w", err)
		}
	}
	return nil
}

// restore re-attaches a restored allocation's namespace. When the network
// it finds afterwards is not the one the tasks were left in (the namespace
// was gone and made anew, or the network was rebuilt on another address
// after a failed check), hc.NetworkRecreated tells the runner to restart
// the tasks into it: they hold the old address in their environment and
// sockets. When restoring fails, hc keeps the namespace path and the last
// persisted status, so the tasks that still run are described as they are.
//
// A Networker reports a namespace it had to make anew with an error
// wrapping cni.ErrNamespaceLost and the new status; the inode comparison
// catches the same for Networkers that do not say so, and the comparison
// with the persisted address catches a network rebuilt in place.
func (h *NetworkHook) restore(ctx context.Context, hc *AllocHookContext, mode string) error {
	path := h.net.NetNSPath(hc.Alloc.ID)
	var prev *structs.AllocNetworkStatus
	if h.state != nil {
		prev, _ = h.state.NetworkStatus(hc.Alloc.ID)
	}
	before, errBefore := NetNSInode(path)
	st, err := h.net.Restore(ctx, hc.Alloc)
	lost := errors.Is(err, cni.ErrNamespaceLost) && st != nil
	if err != nil && !lost {
		hc.NetNSPath = path
		hc.NetworkStatus = prev
		return fmt.Errorf("network mode %q: %w", mode, err)
	}
	after, errAfter := NetNSInode(path)
	switch {
	case lost || (errAfter == nil && (errBefore != nil || before != after)):
		hc.NetworkRecreated = true
		hc.Logger.Warn("allocation network namespace was recreated; its tasks will be restarted into it",
			"alloc_id", hc.Alloc.ID, "netns", path)
	case prev != nil && prev.Address != "" && st != nil && st.Address != prev.Address:
		hc.NetworkRecreated = true
		hc.Logger.Warn("allocation network was rebuilt on another address; its tasks will be restarted into it",
			"alloc_id", hc.Alloc.ID, "old_address", prev.Address, "address", st.Address)
	}
	return h.attach(hc, st)
}

// Postrun implements AllocHook.
func (h *NetworkHook) Postrun(ctx context.Context, hc *AllocHookContext) error {
	if h.net == nil || !needsNamespace(hc.Alloc) {
		return nil
	}
	if err := h.net.Teardown(ctx, hc.Alloc); err != nil {
		return fmt.Errorf("failed to tear down network: %w", err)
	}
	return nil
}

// Destroy implements AllocHook; the namespace went in Postrun.
func (h *NetworkHook) Destroy(ctx context.Context, hc *AllocHookContext) error {
	return h.Postrun(ctx, hc)
}
