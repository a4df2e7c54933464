package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/structs"
)

func init() {
	register(&command{
		name: "alloc status", args: "[options] ALLOC", synopsis: "Show an allocation, its addresses and its tasks",
		help: `Shows the allocation ALLOC (a full ID or a unique prefix): its placement and
status, the addresses of its network (bridge mode: host address -> port in
the namespace), and each task with its resources and recent events. Injected
connect sidecars are labelled "prestart sidecar".`,
		example: "$ meshlet alloc status 8c3a\n$ meshlet alloc status -json 8c3a91f2",
		run:     runAllocStatus,
	})
}

func runAllocStatus(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	asJSON := fs.Bool("json", false, "print the allocation as raw JSON")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return e.usageError(c, "expected exactly one argument: the ALLOC ID")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if *asJSON {
		return e.rawAlloc(client, addr.Addr, fs.Arg(0))
	}
	alloc, _, err := client.Allocations().Info(fs.Arg(0), nil)
	if err != nil {
		return e.errorf("failed to query allocation %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	writeAllocStatus(e.stdout, alloc, time.Now(), sidecarProxyMode(client, alloc.NodeID), followupTime(client, alloc.FollowupEvalID),
		nodeAddress(client, alloc.NodeID))
	e.allocChecks(client, alloc, addr.Addr)
	return exitOK
}

// checksTimeout bounds the checks query: a server forwards it to the
// allocation's node, which may be down.
var checksTimeout = 3 * time.Second

// allocChecks prints the allocation's "Service Checks" section when it
// may have checks: its group declares some (connect sidecars get a
// default one) and it is not terminal. The node answers within
// checksTimeout or the section is left out with a warning on stderr.
func (e *env) allocChecks(client *nomadapi.Client, alloc *nomadapi.Allocation, addr string) {
	if alloc.ClientTerminalStatus() || !declaresChecks(alloc) {
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, checksTimeout)
	defer cancel()
	checks, err := client.Allocations().Checks(alloc.ID, (&nomadapi.QueryOptions{}).WithContext(ctx))
	switch {
	case err == nil:
		writeAllocChecks(e.stdout, checks)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		fmt.Fprintf(e.stderr, "Warning: the service checks are not shown: the allocation's node did not answer within %s\n", checksTimeout)
	default:
		fmt.Fprintf(e.stderr, "Warning: the service checks are not shown: %s\n", describe(err, addr))
	}
}

// declaresChecks reports whether the allocation's group declares a service
// check (group or task service) or a connect sidecar (a service asking for
// one, or its injected connect-proxy task).
func declaresChecks(a *nomadapi.Allocation) bool {
	if a.Job == nil {
		return false
	}
	for _, tg := range a.Job.TaskGroups {
		if tg == nil || tg.Name == nil || *tg.Name != a.TaskGroup {
			continue
		}
		services := tg.Services
		for _, t := range tg.Tasks {
			if _, proxy := connect.ProxyKindService(deref(t).Kind); t != nil && proxy {
				return true
			}
			if t != nil {
				services = append(services[:len(services):len(services)], t.Services...)
			}
		}
		for _, s := range services {
			if s != nil && (len(s.Checks) > 0 || (s.Connect != nil && s.Connect.SidecarService != nil)) {
				return true
			}
		}
	}
	return false
}

// writeAllocChecks prints the "Service Checks" section: each check of the
// allocation's services as its node last ran it.
func writeAllocChecks(w io.Writer, checks nomadapi.AllocCheckStatuses) {
	if len(checks) == 0 {
		return
	}
	ids := make([]string, 0, len(checks))
	for id := range checks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rows := []string{row("Service", "Check", "Status", "Output")}
	for _, id := range ids {
		c := checks[id]
		out := strings.Join(strings.Fields(c.Output), " ")
		if utf8.RuneCountInString(out) > 60 {
			out = string([]rune(out)[:57]) + "..."
		}
		rows = append(rows, row(c.Service, c.Check, c.Status, orNone(out)))
	}
	fmt.Fprintln(w, "\nService Checks:")
	writeTable(w, rows)
}

// nodeAddress is the HTTP address of the node's agent ("" if unknown).
func nodeAddress(client *nomadapi.Client, nodeID string) string {
	node, _, err := client.Nodes().Info(nodeID, nil)
	if err != nil || node == nil {
		return ""
	}
	return node.HTTPAddr
}

// sidecarProxyMode tells which data plane the node's sidecars run, decided
// from the node's attributes exactly as the client and the sidecar task
// decide it; "" if the node cannot be read.
func sidecarProxyMode(client *nomadapi.Client, nodeID string) string {
	node, _, err := client.Nodes().Info(nodeID, nil)
	if err != nil || node == nil {
		return ""
	}
	envoyBin := node.Attributes["meshlet.envoy_binary"]
	mode, err := connect.ResolveSidecarMode(node.Attributes["meshlet.sidecar"], envoyBin)
	switch {
	case err != nil:
		return "unavailable: " + err.Error()
	case mode == connect.SidecarEnvoy:
		return "Envoy (" + envoyBin + ")"
	}
	return "built-in (meshlet connect proxy)"
}

func (e *env) rawAlloc(client *nomadapi.Client, addr, id string) int {
	var raw json.RawMessage
	if _, err := client.Raw().Query("/v1/allocation/"+url.PathEscape(id), &raw, nil); err != nil {
		return e.errorf("failed to query allocation %q: %s", id, describe(err, addr))
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "    "); err != nil {
		return e.errorf("agent returned invalid JSON: %v", err)
	}
	fmt.Fprintln(e.stdout, out.String())
	return exitOK
}

// writeAllocStatus renders `alloc status` like Nomad's CLI.
// eligible is when a pending replacement will be placed (zero: none).
func writeAllocStatus(w io.Writer, a *nomadapi.Allocation, now time.Time, proxyMode string, eligible time.Time, nodeAddr string) {
	kv := [][2]string{
		{"ID", a.ID},
		{"Eval ID", short(a.EvalID)},
		{"Name", a.Name},
		{"Node ID", short(a.NodeID)},
		{"Node Name", orNone(a.NodeName)},
		{"Node Address", orNone(nodeAddr)},
		{"Job ID", a.JobID},
		{"Job Version", fmt.Sprint(allocJobVersion(a))},
		{"Client Status", a.ClientStatus},
		{"Client Description", orNone(a.ClientDescription)},
		{"Desired Status", a.DesiredStatus},
		{"Desired Description", orNone(a.DesiredDescription)},
		{"Created", ago(a.CreateTime, now)},
		{"Modified", ago(a.ModifyTime, now)},
	}
	writeKV(w, append(kv, rescheduleKV(a, eligible, now)...))
	writeAllocAddresses(w, a)
	if a.NetworkStatus != nil && a.NetworkStatus.Address != "" {
		fmt.Fprintf(w, "\nAllocation Address: %s\n", escapeUnprintable(a.NetworkStatus.Address))
	}
	tg := allocTaskGroup(a)
	for _, name := range orderedTasks(a, tg) {
		writeTaskStatus(w, name, a.TaskStates[name], taskOf(tg, name), proxyMode)
	}
}

func allocJobVersion(a *nomadapi.Allocation) uint64 {
	if a.Job == nil {
		return 0
	}
	return deref(a.Job.Version)
}

func allocTaskGroup(a *nomadapi.Allocation) *nomadapi.TaskGroup {
	if a.Job == nil {
		return nil
	}
	return a.Job.LookupTaskGroup(a.TaskGroup)
}

func taskOf(tg *nomadapi.TaskGroup, name string) *nomadapi.Task {
	if tg == nil {
		return nil
	}
	for _, t := range tg.Tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// writeAllocAddresses prints the "Allocation Addresses" table of the
// group's network.
func writeAllocAddresses(w io.Writer, a *nomadapi.Allocation) {
	if a.AllocatedResources == nil || len(a.AllocatedResources.Shared.Networks) == 0 && len(a.AllocatedResources.Shared.Ports) == 0 {
		return
	}
	mode := "host"
	dynamic := map[string]bool{}
	nets := a.AllocatedResources.Shared.Networks
	if tg := allocTaskGroup(a); tg != nil && len(tg.Networks) > 0 {
		nets = tg.Networks
	}
	if len(nets) > 0 {
		if nets[0].Mode != "" {
			mode = nets[0].Mode
		}
		for _, p := range nets[0].DynamicPorts {
			dynamic[p.Label] = true
		}
	}
	ports := a.AllocatedResources.Shared.Ports
	if len(ports) == 0 {
		return
	}
	fmt.Fprintf(w, "\nAllocation Addresses (mode = %q):\n", mode)
	rows := []string{row("Label", "Dynamic", "Address")}
	for _, p := range ports {
		host := p.HostIP
		if host == "" {
			host = "127.0.0.1"
		}
		to := p.To
		if to <= 0 {
			to = p.Value
		}
		dyn := "no"
		if dynamic[p.Label] {
			dyn = "yes"
		}
		rows = append(rows, row(p.Label, dyn, fmt.Sprintf("%s:%d -> %d", host, p.Value, to)))
	}
	writeTable(w, rows)
}

// lifecycleRank orders prestart, main, poststart, poststop tasks.
func lifecycleRank(t *nomadapi.Task) int {
	if t == nil || t.Lifecycle == nil {
		return 1
	}
	switch t.Lifecycle.Hook {
	case "prestart":
		return 0
	case "poststart":
		return 2
	case "poststop":
		return 3
	}
	return 1
}

// orderedTasks lists the allocation's tasks in lifecycle order, then by name.
func orderedTasks(a *nomadapi.Allocation, tg *nomadapi.TaskGroup) []string {
	seen := map[string]bool{}
	var names []string
	if tg != nil {
		for _, t := range tg.Tasks {
			names, seen[t.Name] = append(names, t.Name), true
		}
	}
	for name := range a.TaskStates {
		if !seen[name] {
			names = append(names, name)
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		ri, rj := lifecycleRank(taskOf(tg, names[i])), lifecycleRank(taskOf(tg, names[j]))
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names
}

// lifecycleLabel is " (prestart sidecar)" and the like, or "".
func lifecycleLabel(t *nomadapi.Task) string {
	if t == nil || t.Lifecycle == nil || t.Lifecycle.Hook == "" {
		return ""
	}
	if t.Lifecycle.Sidecar {
		return fmt.Sprintf(" (%s sidecar)", t.Lifecycle.Hook)
	}
	return fmt.Sprintf(" (%s)", t.Lifecycle.Hook)
}

const maxRecentEvents = 10

// sidecarProxy names a sidecar task's data plane: the Envoy image of a
// docker sidecar, else the runtime its node's connect_proxy driver chose
// (its latest "Driver" event), else the node's proxyMode.
func sidecarProxy(t *nomadapi.Task, ts *nomadapi.TaskState, proxyMode string) string {
	if t.Driver == connect.SidecarDriverDocker {
		return fmt.Sprintf("Envoy container (%v)", t.Config["image"])
	}
	if ts != nil {
		for i := len(ts.Events) - 1; i >= 0; i-- {
			if ev := ts.Events[i]; ev != nil && ev.Type == structs.TaskDriverMessage && ev.Details[connectproxy.DetailProxy] != "" {
				return ev.Details[connectproxy.DetailProxy]
			}
		}
	}
	return proxyMode
}

func writeTaskStatus(w io.Writer, name string, ts *nomadapi.TaskState, t *nomadapi.Task, proxyMode string) {
	state := "pending"
	if ts != nil {
		state = ts.State
	}
	fmt.Fprintf(w, "\nTask %q%s is %q\n", name, lifecycleLabel(t), state)
	if t != nil && strings.HasPrefix(t.Kind, connect.KindPrefix) {
		if p := sidecarProxy(t, ts, proxyMode); p != "" {
			fmt.Fprintf(w, "Sidecar Proxy: %s\n", escapeUnprintable(p))
		}
	}
	if gw, label := gatewayLabel(t); gw != "" {
		fmt.Fprintf(w, "%s: %s", label, escapeUnprintable(gw))
		if p := sidecarProxy(t, ts, proxyMode); p != "" {
			fmt.Fprintf(w, " (%s)", escapeUnprintable(p))
		}
		fmt.Fprintln(w)
	}
	if t != nil && t.Resources != nil {
		fmt.Fprintln(w, "Task Resources:")
		writeTable(w, []string{
			row("CPU", "Memory"),
			row(fmt.Sprintf("%d MHz", deref(t.Resources.CPU)), fmt.Sprintf("%d MiB", deref(t.Resources.MemoryMB))),
		})
	}
	if ts == nil {
		return
	}
	fmt.Fprintf(w, "\nRecent Events:\n")
	rows := []string{row("Time", "Type", "Description")}
	for i := len(ts.Events) - 1; i >= 0 && len(rows) <= maxRecentEvents; i-- {
		ev := ts.Events[i]
		rows = append(rows, row(timestamp(ev.Time), ev.Type, eventDescription(ev)))
	}
	writeTable(w, rows)
}

// pickTask returns the task to act on: the one named, or the only task of
// the allocation; otherwise an error listing the tasks.
func pickTask(a *nomadapi.Allocation, name string) (string, error) {
	tasks := orderedTasks(a, allocTaskGroup(a))
	if name != "" {
		for _, t := range tasks {
			if t == name {
				return name, nil
			}
		}
		return "", fmt.Errorf("allocation %q has no task %q; tasks: %s", short(a.ID), name, strings.Join(tasks, ", "))
	}
	switch len(tasks) {
	case 0:
		return "", fmt.Errorf("allocation %q has no tasks", short(a.ID))
	case 1:
		return tasks[0], nil
	}
	return "", fmt.Errorf("allocation %q has %d tasks; name one of: %s", short(a.ID), len(tasks), strings.Join(tasks, ", "))
}

// gatewayLabel is the gateway service a gateway task runs, and the label
// alloc status prints it with ("" when t runs no gateway).
func gatewayLabel(t *nomadapi.Task) (service, label string) {
	if t == nil {
		return "", ""
	}
	if s, ok := strings.CutPrefix(t.Kind, connect.IngressKindPrefix); ok {
		return s, "Ingress Gateway"
	}
	if s, ok := strings.CutPrefix(t.Kind, connect.TerminatingKindPrefix); ok {
		return s, "Terminating Gateway"
	}
	if s, ok := strings.CutPrefix(t.Kind, connect.MeshKindPrefix); ok {
		return s, "Mesh Gateway"
	}
	return "", ""
}
