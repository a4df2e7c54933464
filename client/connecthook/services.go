package connecthook

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// ServicesHook keeps the allocation's catalog registrations and runs their
// health checks. Group services (sidecar proxies and gateways among them)
// are registered for as long as the allocation runs; a task's own services
// only while the task runs, as Nomad does: they go when the task exits
// (also for the delay before a restart) and come back when it runs again.
type ServicesHook struct {
	d Deps

	// mu guards the fields below; it is not held while the checks stop.
	mu     sync.Mutex
	checks *serviceChecks
	// live is true from Prerun until PreKill, Postrun or Destroy: only
	// then do task state changes register or deregister task services.
	live bool
	// byTask are the task services' instances, by task; up the tasks whose
	// services are registered.
	byTask map[string][]catalog.ServiceInstance
	up     map[string]bool
}

var _ allocrunner.TaskStateHook = (*ServicesHook)(nil)

// Name implements allocrunner.AllocHook.
func (h *ServicesHook) Name() string { return "services" }

// Prerun implements allocrunner.AllocHook: it registers the group
// services and starts the checks; task services wait for their task to
// run (TaskStateChanged).
func (h *ServicesHook) Prerun(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	tg := group(hc.Alloc)
	if tg == nil {
		return nil
	}
	addr := "127.0.0.1"
	if hc.NetworkStatus != nil && hc.NetworkStatus.Address != "" {
		addr = hc.NetworkStatus.Address
	}
	insts, err := connect.Registrations(connect.Placement{Alloc: hc.Alloc, Address: addr, NodeAddress: h.d.NodeAddress,
		NodeID: h.d.NodeID, NodeName: h.d.NodeName, Datacenter: h.d.Datacenter})
	if err != nil {
		return fmt.Errorf("failed to register services: %w", err)
	}
	for _, inst := range insts {
		if inst.Kind == catalog.KindConnectProxy && h.d.ValidateProxy != nil {
			if err := h.d.ValidateProxy(inst); err != nil {
				return fmt.Errorf("service %q sidecar: %w", inst.Proxy.DestinationServiceName, err)
			}
		}
	}
	h.stopChecks() // a Prerun again (restore) starts them anew
	byTask, owner := taskInstances(hc.Alloc.ID, tg, insts)
	sc, err := h.startChecks(hc, insts, owner)
	if err != nil {
		return fmt.Errorf("failed to start service checks: %w", err)
	}
	h.mu.Lock()
	h.checks, h.live, h.byTask, h.up = sc, true, byTask, map[string]bool{}
	h.mu.Unlock()
	for _, inst := range insts {
		if owner[inst.ID] != "" {
			continue
		}
		if sc == nil {
			h.d.Catalog.Register(inst)
		}
		hc.Logger.Debug("service registered", "service", inst.Name, "service_id", inst.ID,
			"address", inst.Address, "port", inst.Port)
	}
	return nil
}

// taskInstances sorts out the task services among insts: by task, and the
// task of each one's ID.
func taskInstances(allocID string, tg *structs.TaskGroup, insts []catalog.ServiceInstance) (map[string][]catalog.ServiceInstance, map[string]string) {
	owner := map[string]string{}
	for _, t := range tg.Tasks {
		for _, s := range t.Services {
			owner[connect.TaskServiceID(allocID, t.Name, s.Name, s.PortLabel)] = t.Name
		}
	}
	byTask := map[string][]catalog.ServiceInstance{}
	for _, inst := range insts {
		if task := owner[inst.ID]; task != "" {
			byTask[task] = append(byTask[task], inst)
		}
	}
	return byTask, owner
}

// TaskStateChanged implements allocrunner.TaskStateHook: a task's
// services are registered while it runs and deregistered otherwise.
func (h *ServicesHook) TaskStateChanged(hc *allocrunner.AllocHookContext, task string, st *structs.TaskState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	insts := h.byTask[task]
	up := st != nil && st.State == structs.TaskStateRunning
	if !h.live || len(insts) == 0 || up == h.up[task] {
		return
	}
	h.up[task] = up
	for _, inst := range insts {
		switch {
		case up && h.checks != nil:
			h.checks.show(inst.ID)
		case up:
			h.d.Catalog.Register(inst)
		case h.checks != nil:
			h.checks.hide(inst.ID)
		default:
			if err := h.d.Catalog.Deregister(inst.ID); err != nil && !errors.Is(err, catalog.ErrNotFound) {
				hc.Logger.Warn("failed to deregister task service", "task", task, "service", inst.Name, "error", err)
			}
		}
	}
	hc.Logger.Debug("task services follow their task", "task", task, "registered", up, "count", len(insts))
}

func (h *ServicesHook) stopChecks() {
	h.mu.Lock()
	sc := h.checks
	h.checks = nil
	h.mu.Unlock()
	sc.stop()
}

// deregisterAll ends the registrations: no task state change registers a
// task service again until the next Prerun.
func (h *ServicesHook) deregisterAll(hc *allocrunner.AllocHookContext) {
	h.mu.Lock()
	h.live, h.up = false, nil
	h.mu.Unlock()
	h.stopChecks()
	h.d.Catalog.DeregisterAlloc(hc.Alloc.ID)
}

// PreKill implements allocrunner.PreKillHook: deregister first, so peers
// stop sending traffic while tasks drain.
func (h *ServicesHook) PreKill(ctx context.Context, hc *allocrunner.AllocHookContext) {
	h.deregisterAll(hc)
}

// Postrun implements allocrunner.AllocHook.
func (h *ServicesHook) Postrun(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	h.deregisterAll(hc)
	return nil
}

// Destroy implements allocrunner.AllocHook.
func (h *ServicesHook) Destroy(ctx context.Context, hc *allocrunner.AllocHookContext) error {
	return h.Postrun(ctx, hc)
}
