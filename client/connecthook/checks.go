package connecthook

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/checks"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// serviceChecks runs an allocation's service checks and keeps the health
// of its registrations: an instance with a critical check is unhealthy
// (no proxy sends it traffic), and its sidecar proxy follows it (Consul's
// alias check).
type serviceChecks struct {
	reg    Registrar
	runner *checks.Runner

	// mu guards insts, own and hidden, and is held while registering what
	// changed: an update, its recomputed health and its registration are
	// one step, so concurrent results of one instance's checks are neither
	// lost nor registered out of order.
	mu    sync.Mutex
	insts map[string]catalog.ServiceInstance // by ID
	own   map[string][]catalog.Check         // each instance's own checks, by ID
	// hidden are the instances not registered (task services whose task
	// does not run): their checks' results are kept, not registered.
	hidden map[string]bool
}

// checkDefinitions maps the allocation's service checks to the runner's
// definitions, ID "service:<service-id>:<n>" as Consul's agent names them.
// In bridge mode the targets are 127.0.0.1 and the ports inside the
// namespace (the runner dials from inside it).
func checkDefinitions(a *structs.Allocation) ([]checks.Definition, error) {
	tg := group(a)
	if tg == nil {
		return nil, nil
	}
	bridge := connect.BridgeMode(tg)
	var out []checks.Definition
	add := func(s *structs.Service, serviceID, task string) error {
		for i, c := range s.Checks {
			d, err := checkDefinition(a, s, c, bridge)
			if err != nil {
				return fmt.Errorf("service %q check %q: %w", s.Name, c.Name, err)
			}
			d.ID, d.ServiceID = fmt.Sprintf("service:%s:%d", serviceID, i+1), serviceID
			if d.Task == "" {
				d.Task = task
			}
			out = append(out, d)
		}
		return nil
	}
	for _, s := range tg.Services {
		id := connect.ServiceID(a.ID, tg.Name, s.Name, s.PortLabel)
		// A group service's checks run in (and check_restart restarts)
		// the service's task, if it names one, as Nomad's do; check_restart
		// without a task restarts the allocation's main tasks.
		if err := add(s, id, s.TaskName); err != nil {
			return nil, err
		}
		if d, ok, err := sidecarCheck(a, s, id, bridge); err != nil {
			return nil, err
		} else if ok {
			out = append(out, d)
		}
	}
	for _, t := range tg.Tasks {
		for _, s := range t.Services {
			if err := add(s, connect.TaskServiceID(a.ID, t.Name, s.Name, s.PortLabel), t.Name); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// sidecarCheck is Nomad's default check of a sidecar proxy: TCP to its
// public listener every 10 s. Unlike Nomad's it starts passing and turns
// critical only after two failures in a row, so a proxy takes traffic as
// soon as it listens (its first run may come before it does) and one that
// stops listening leaves every proxy's endpoints within two intervals.
func sidecarCheck(a *structs.Allocation, s *structs.Service, serviceID string, bridge bool) (checks.Definition, bool, error) {
	if !s.Connect.HasSidecar() || s.Connect.SidecarService.DisableDefaultTCPCheck {
		return checks.Definition{}, false, nil
	}
	port, err := connect.ServicePort(a, connect.SidecarPortLabel(s), bridge)
	if err != nil {
		return checks.Definition{}, false, fmt.Errorf("service %q sidecar check: %w", s.Name, err)
	}
	proxyID := connect.ProxyID(serviceID)
	return checks.Definition{ID: "service:" + proxyID + ":1", Name: "Connect Sidecar Listening", ServiceID: proxyID,
		Type: checks.TypeTCP, Address: "127.0.0.1", Port: port, Interval: sidecarCheckInterval, Timeout: sidecarCheckTimeout,
		InitialStatus: checks.StatusPassing, FailuresBeforeCritical: 2}, true, nil
}

// The default sidecar check's interval and timeout (Nomad's; variables
// for tests).
var (
	sidecarCheckInterval = 10 * time.Second
	sidecarCheckTimeout  = 2 * time.Second
)

func checkDefinition(a *structs.Allocation, s *structs.Service, c structs.ServiceCheck, bridge bool) (checks.Definition, error) {
	d := checks.Definition{
		Name: c.Name, Type: c.Type, Address: "127.0.0.1", Path: c.Path, Protocol: c.Protocol, Method: c.Method,
		Header: c.Header, Body: c.Body, GRPCService: c.GRPCService, GRPCUseTLS: c.GRPCUseTLS, TLSSkipVerify: c.TLSSkipVerify,
		TLSServerName: c.TLSServerName, Command: c.Command, Args: c.Args, Task: c.TaskName, Interval: c.Interval,
		Timeout: c.Timeout, SuccessBeforePassing: c.SuccessBeforePassing, FailuresBeforeCritical: c.FailuresBeforeCritical,
		FailuresBeforeWarning: c.FailuresBeforeWarning, InitialStatus: checks.Status(c.InitialStatus),
	}
	if d.Name == "" {
		d.Name = fmt.Sprintf("service: %q check", s.Name)
	}
	if c.CheckRestart != nil {
		d.CheckRestart = &checks.CheckRestart{Limit: c.CheckRestart.Limit, IgnoreWarnings: c.CheckRestart.IgnoreWarnings}
		if c.CheckRestart.Grace != nil {
			d.CheckRestart.Grace = *c.CheckRestart.Grace
		}
	}
	if c.Type == checks.TypeScript {
		return d, nil
	}
	label := c.PortLabel
	if label == "" {
		label = s.PortLabel
	}
	port, err := connect.ServicePort(a, label, bridge)
	if err != nil {
		return d, err
	}
	d.Port = port
	return d, nil
}

// initialChecks are the catalog checks before the first run, by instance.
func initialChecks(defs []checks.Definition) map[string][]catalog.Check {
	out := map[string][]catalog.Check{}
	for _, d := range defs {
		out[d.ServiceID] = append(out[d.ServiceID],
			catalog.Check{ID: d.ID, Name: d.Name, Type: d.Type, Status: string(d.StartingStatus())})
	}
	return out
}

// restoredDefinitions starts the checks of an allocation found after an
// agent restart passing, unless their jobspec sets initial_status: its
// instances were healthy a moment ago, and registering them critical would
// drop their endpoints from every proxy until the checks pass again. The
// thresholds apply from the first run.
func restoredDefinitions(defs []checks.Definition) {
	for i := range defs {
		if defs[i].InitialStatus == "" {
			defs[i].InitialStatus = checks.StatusPassing
		}
	}
}

// updateLocked applies one check's result to the own checks of its
// instance, recomputes the health of the instance and of the proxies
// aliasing it, and returns them; none when the check is not known.
func (sc *serviceChecks) updateLocked(r checks.Result) []catalog.ServiceInstance {
	id := r.ServiceID
	if _, ok := sc.insts[id]; !ok {
		return nil
	}
	own := slices.Clone(sc.own[id])
	i := slices.IndexFunc(own, func(c catalog.Check) bool { return c.ID == r.CheckID })
	if i < 0 {
		return nil
	}
	own[i].Status, own[i].Output = string(r.Status), r.Output
	sc.own[id] = own
	changed := []catalog.ServiceInstance{sc.recomputeLocked(id)}
	for pid, p := range sc.insts {
		if p.Proxy != nil && p.Proxy.DestinationServiceID == id {
			changed = append(changed, sc.recomputeLocked(pid))
		}
	}
	return changed
}

// recomputeLocked sets instance id's checks (its own, and for a proxy the
// alias of its destination when that has checks) and health.
func (sc *serviceChecks) recomputeLocked(id string) catalog.ServiceInstance {
	inst := sc.insts[id]
	cks := append([]catalog.Check(nil), sc.own[id]...)
	if inst.Proxy != nil {
		if dest, ok := sc.insts[inst.Proxy.DestinationServiceID]; ok && len(sc.own[dest.ID]) > 0 {
			dest.Checks = sc.own[dest.ID]
			cks = append(cks, aliasCheck(inst, dest))
		}
	}
	inst.Checks, inst.Healthy = cks, catalog.HealthyChecks(cks)
	sc.insts[id] = inst
	return inst
}

// aliasCheck mirrors the destination service's health on its sidecar.
func aliasCheck(proxy, dest catalog.ServiceInstance) catalog.Check {
	st, out := string(checks.StatusPassing), "all checks of "+dest.Name+" pass"
	for _, c := range dest.Checks {
		switch {
		case c.Status == string(checks.StatusCritical):
			st, out = c.Status, c.Name+": "+c.Output
		case c.Status == string(checks.StatusWarning) && st == string(checks.StatusPassing):
			st, out = c.Status, c.Name+": "+c.Output
		}
	}
	return catalog.Check{ID: "service:" + proxy.ID + ":alias", Name: "Connect Sidecar Aliasing " + dest.ID,
		Type: "alias", Status: st, Output: strings.TrimSpace(out)}
}

// onResult is the runner's OnChange: one check's new status, applied and
// registered in one critical section.
func (sc *serviceChecks) onResult(r checks.Result) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, inst := range sc.updateLocked(r) {
		if !sc.hidden[inst.ID] {
			sc.reg.Register(inst)
		}
	}
}

// show registers instance id, with its checks' latest results.
func (sc *serviceChecks) show(id string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, ok := sc.insts[id]; !ok {
		return
	}
	delete(sc.hidden, id)
	sc.reg.Register(sc.recomputeLocked(id))
}

// hide deregisters instance id; its checks' results are kept for show.
func (sc *serviceChecks) hide(id string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.hidden[id] = true
	_ = sc.reg.Deregister(id) // not registered: nothing to do
}

// startChecks registers insts with their checks' initial statuses (but
// for the task services, by ID in taskOf, which wait for their task) and
// starts running the checks; it returns nil when the allocation has none
// (insts are then registered by the caller as they are).
func (h *ServicesHook) startChecks(hc *allocrunner.AllocHookContext, insts []catalog.ServiceInstance, taskOf map[string]string) (*serviceChecks, error) {
	defs, err := checkDefinitions(hc.Alloc)
	if err != nil || len(defs) == 0 {
		return nil, err
	}
	if hc.Restored {
		restoredDefinitions(defs)
	}
	sc := &serviceChecks{reg: h.d.Catalog, insts: map[string]catalog.ServiceInstance{}, hidden: map[string]bool{}}
	for _, inst := range insts {
		sc.insts[inst.ID] = inst
		if taskOf[inst.ID] != "" {
			sc.hidden[inst.ID] = true
		}
	}
	cfg := checks.Config{Logger: hc.Logger, NetNS: hc.NetNSPath, OnChange: sc.onResult}
	if h.d.CheckExec != nil {
		cfg.Exec = h.d.CheckExec(hc.Alloc.ID)
	}
	if h.d.CheckRestart != nil {
		cfg.Restarter = h.d.CheckRestart(hc.Alloc.ID)
	}
	sc.runner = checks.New(cfg)
	sc.mu.Lock()
	sc.own = initialChecks(defs)
	for _, inst := range insts {
		if inst := sc.recomputeLocked(inst.ID); !sc.hidden[inst.ID] {
			h.d.Catalog.Register(inst)
		}
	}
	sc.mu.Unlock()
	sc.runner.Start(defs)
	return sc, nil
}

func (sc *serviceChecks) stop() {
	if sc != nil && sc.runner != nil {
		sc.runner.Stop()
	}
}
