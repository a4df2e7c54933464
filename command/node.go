package command

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

func init() {
	register(&command{
		name: "node status", args: "[options] [NODE]", synopsis: "List client nodes, or show one node",
		help: `Without NODE, lists the client nodes. With NODE (an ID or unique prefix),
shows the node, its drivers (detected, healthy) and its allocations.`,
		example: "$ meshlet node status\n$ meshlet node status f3a1",
		run:     runNodeStatus,
	})
}

func runNodeStatus(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	verbose := fs.Bool("verbose", false, "full IDs and addresses; with NODE also its resources and attributes")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 || fs.NArg() == 1 && fs.Arg(0) == "" {
		return e.usageError(c, "expected at most one argument: a NODE ID")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if fs.NArg() == 0 {
		nodes, _, err := client.Nodes().List(nil)
		if err != nil {
			return e.errorf("failed to list nodes: %s", describe(err, addr.Addr))
		}
		rows := []string{row("ID", "DC", "Name", "Drain", "Eligibility", "Status")}
		if *verbose {
			rows = []string{row("ID", "DC", "Name", "Address", "Version", "Drain", "Eligibility", "Status")}
		}
		for _, n := range nodes {
			if *verbose {
				rows = append(rows, row(n.ID, n.Datacenter, n.Name, orNone(n.Address), n.Version, n.Drain, n.SchedulingEligibility, n.Status))
				continue
			}
			rows = append(rows, row(short(n.ID), n.Datacenter, n.Name, n.Drain, n.SchedulingEligibility, n.Status))
		}
		writeTable(e.stdout, rows)
		return exitOK
	}
	node, _, err := client.Nodes().Info(fs.Arg(0), nil)
	if err != nil {
		return e.errorf("failed to query node %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	allocs, _, err := client.Nodes().Allocations(node.ID, nil)
	if err != nil {
		return e.errorf("failed to list allocations of node %q: %s", short(node.ID), describe(err, addr.Addr))
	}
	writeNodeStatus(e, node, allocs)
	if *verbose {
		writeNodeVerbose(e, node)
	}
	return exitOK
}

// writeNodeVerbose adds the node's capacity, reservation and attributes.
func writeNodeVerbose(e *env, node *nomadapi.Node) {
	fmt.Fprintf(e.stdout, "\nResources\n")
	rows := []string{row("", "CPU (MHz)", "Memory (MB)", "Disk (MB)")}
	if r := node.NodeResources; r != nil {
		rows = append(rows, row("Total", r.Cpu.CpuShares, r.Memory.MemoryMB, r.Disk.DiskMB))
	}
	if r := node.ReservedResources; r != nil {
		rows = append(rows, row("Reserved", r.Cpu.CpuShares, r.Memory.MemoryMB, r.Disk.DiskMB))
	}
	writeTable(e.stdout, rows)
	fmt.Fprintf(e.stdout, "\nAttributes\n")
	var kv [][2]string
	for _, k := range slices.Sorted(maps.Keys(node.Attributes)) {
		kv = append(kv, [2]string{k, node.Attributes[k]})
	}
	writeKV(e.stdout, kv)
}

func writeNodeStatus(e *env, node *nomadapi.Node, allocs []*nomadapi.Allocation) {
	names := slices.Sorted(maps.Keys(node.Drivers))
	var healthy []string
	for _, name := range names {
		if d := node.Drivers[name]; d != nil && d.Detected && d.Healthy {
			healthy = append(healthy, name)
		}
	}
	writeKV(e.stdout, [][2]string{
		{"ID", node.ID},
		{"Name", node.Name},
		{"Datacenter", node.Datacenter},
		{"Status", node.Status},
		{"Drain", fmt.Sprint(node.Drain)},
		{"Eligibility", node.SchedulingEligibility},
		{"HTTP Addr", orNone(node.HTTPAddr)},
		{"Drivers", orNone(strings.Join(healthy, ","))},
	})
	fmt.Fprintf(e.stdout, "\nDrivers\n")
	rows := []string{row("Driver", "Detected", "Healthy", "Description")}
	for _, name := range names {
		d := node.Drivers[name]
		if d == nil {
			continue
		}
		rows = append(rows, row(name, d.Detected, d.Healthy, orNone(d.HealthDescription)))
	}
	writeTable(e.stdout, rows)
	fmt.Fprintf(e.stdout, "\nAllocations\n")
	if len(allocs) == 0 {
		fmt.Fprintln(e.stdout, "No allocations placed")
		return
	}
	now := time.Now()
	rows = []string{row("ID", "Job ID", "Task Group", "Desired", "Status", "Created")}
	for _, a := range allocs {
		rows = append(rows, row(short(a.ID), a.JobID, a.TaskGroup, a.DesiredStatus, a.ClientStatus, ago(a.CreateTime, now)))
	}
	writeTable(e.stdout, rows)
}

// defaultDrainDeadline is Nomad's: allocations still on a draining node
// after it are stopped.
const defaultDrainDeadline = time.Hour

func init() {
	register(&command{
		name: "node eligibility", args: "[options] -enable|-disable NODE", synopsis: "Toggle a node's scheduling eligibility",
		help: `Marks NODE (an ID or unique prefix; -self: the agent's own node) eligible
or ineligible for new allocations. An ineligible node keeps the allocations
it runs; to move them elsewhere, drain it (meshlet node drain). A draining
node cannot be made eligible.`,
		example: "$ meshlet node eligibility -disable f3a1\n$ meshlet node eligibility -enable -self",
		run:     runNodeEligibility,
	}, &command{
		name: "node drain", args: "[options] -enable|-disable NODE", synopsis: "Drain a node, or stop draining it",
		help: `-enable drains NODE (an ID or unique prefix; -self: the agent's own node):
it becomes ineligible for new allocations and its allocations are migrated
to other nodes (batch allocations are left to finish). Allocations still
there at the deadline are stopped. The drain completes once nothing runs on
the node, which stays ineligible. Without -detach the command follows the
drain until it completes (Ctrl-C stops following, not the drain).

-disable cancels a drain in progress and makes the node eligible again
(-keep-ineligible: it stays ineligible).

A NODE given as a prefix asks for confirmation unless -yes.`,
		example: "$ meshlet node drain -enable -deadline 30m f3a1\n$ meshlet node drain -disable -yes f3a1",
		run:     runNodeDrain,
	})
}

func runNodeEligibility(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	enable := fs.Bool("enable", false, "mark the node eligible for new allocations")
	disable := fs.Bool("disable", false, "mark the node ineligible for new allocations")
	self := fs.Bool("self", false, "the node of the agent at -address")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if *enable == *disable {
		return e.usageError(c, "either the '-enable' or '-disable' flag must be set")
	}
	client, node, code, ok := e.targetNode(c, fs, addr, *self)
	if !ok {
		return code
	}
	if _, err := client.Nodes().ToggleEligibility(node.ID, *enable, nil); err != nil {
		return e.errorf("failed to update scheduling eligibility: %s", describe(err, addr.Addr))
	}
	state := "ineligible"
	if *enable {
		state = "eligible"
	}
	fmt.Fprintf(e.stdout, "Node %q scheduling eligibility set: %s for scheduling\n", node.ID, state)
	return exitOK
}

// drainFlags are node drain's options.
type drainFlags struct {
	enable, disable, force, noDeadline, ignoreSystem, keepIneligible, detach, yes, self *bool
	deadline                                                                            *string
}

func runNodeDrain(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	f := drainFlags{
		enable:         fs.Bool("enable", false, "drain the node"),
		disable:        fs.Bool("disable", false, "cancel the node's drain"),
		deadline:       fs.String("deadline", "", "`duration` after which remaining allocations are stopped (default 1h)"),
		force:          fs.Bool("force", false, "stop every allocation at once (no deadline to wait for)"),
		noDeadline:     fs.Bool("no-deadline", false, "never force allocations off the node"),
		ignoreSystem:   fs.Bool("ignore-system", false, "leave system jobs' allocations on the node (recorded; meshlet has no system jobs)"),
		keepIneligible: fs.Bool("keep-ineligible", false, "with -disable: leave the node ineligible"),
		detach:         fs.Bool("detach", false, "return once the drain is set, without following it"),
		yes:            fs.Bool("yes", false, "do not ask for confirmation"),
		self:           fs.Bool("self", false, "the node of the agent at -address"),
	}
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	spec, msg := f.spec()
	if msg != "" {
		return e.usageError(c, msg)
	}
	client, node, code, ok := e.targetNode(c, fs, addr, *f.self)
	if !ok {
		return code
	}
	if node.ID != fs.Arg(0) && !*f.self && !*f.yes {
		if code, ok := e.confirmDrain(node.ID, *f.enable); !ok {
			return code
		}
	}
	resp, err := client.Nodes().UpdateDrainOpts(node.ID, &nomadapi.DrainOptions{DrainSpec: spec, MarkEligible: !*f.keepIneligible}, nil)
	if err != nil {
		return e.errorf("failed to update drain specification: %s", describe(err, addr.Addr))
	}
	switch {
	case *f.disable:
		fmt.Fprintf(e.stdout, "Node %q drain strategy unset\n", node.ID)
		return exitOK
	case *f.detach:
		fmt.Fprintf(e.stdout, "Node %q drain strategy set\n", node.ID)
		return exitOK
	}
	now := time.Now()
	fmt.Fprintf(e.stdout, "%s: Ctrl-C to stop monitoring: will not cancel the node drain\n", drainTime(now))
	fmt.Fprintf(e.stdout, "%s: Node %q drain strategy set\n", drainTime(now), node.ID)
	for m := range client.Nodes().MonitorDrain(e.ctx, node.ID, resp.LastIndex, *f.ignoreSystem) {
		if m.Level == nomadapi.MonitorMsgLevelError {
			return e.errorf("%s", m)
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", drainTime(time.Now()), escapeUnprintable(m.String()))
	}
	return exitOK
}

// spec checks the flags and returns the drain to ask for (nil with
// -disable), or a usage message.
func (f *drainFlags) spec() (*nomadapi.DrainSpec, string) {
	switch {
	case *f.enable == *f.disable:
		return nil, "either the '-enable' or '-disable' flag must be set"
	case *f.disable && (*f.deadline != "" || *f.force || *f.noDeadline || *f.ignoreSystem):
		return nil, "-disable can't be combined with flags configuring drain strategy"
	case *f.deadline != "" && (*f.force || *f.noDeadline):
		return nil, "-deadline can't be combined with -force or -no-deadline"
	case *f.force && *f.noDeadline:
		return nil, "-force and -no-deadline are mutually exclusive"
	case *f.disable:
		return nil, ""
	}
	d := defaultDrainDeadline
	switch {
	case *f.force:
		d = -1 * time.Second
	case *f.noDeadline:
		d = 0
	case *f.deadline != "":
		var err error
		if d, err = time.ParseDuration(*f.deadline); err != nil {
			return nil, fmt.Sprintf("failed to parse deadline %q: %v", *f.deadline, err)
		}
		if d <= 0 {
			return nil, "a positive drain duration must be given"
		}
	}
	return &nomadapi.DrainSpec{Deadline: d, IgnoreSystemJobs: *f.ignoreSystem}, ""
}

// confirmDrain asks before draining a node named by a prefix, as Nomad:
// only an exact "y" goes on.
func (e *env) confirmDrain(nodeID string, enable bool) (int, bool) {
	verb := "disable"
	if enable {
		verb = "enable"
	}
	fmt.Fprintf(e.stdout, "Are you sure you want to %s drain mode for node %q? [y/N] ", verb, nodeID)
	answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
	switch answer = strings.TrimSpace(answer); {
	case answer == "y":
		return 0, true
	case answer == "" || strings.ToLower(answer)[0] == 'n':
		fmt.Fprintln(e.stdout, "Canceling drain toggle")
		return exitOK, false
	}
	fmt.Fprintln(e.stdout, "No confirmation detected. For confirmation, an exact 'y' is required.")
	return exitError, false
}

// targetNode resolves the command's NODE argument (or -self) to one node.
func (e *env) targetNode(c *command, fs *flag.FlagSet, addr *apiTarget, self bool) (*nomadapi.Client, *nomadapi.NodeListStub, int, bool) {
	if self && fs.NArg() != 0 || !self && (fs.NArg() != 1 || fs.Arg(0) == "") {
		return nil, nil, e.usageError(c, "expected exactly one argument: the NODE ID (or -self)"), false
	}
	client, err := nomadClient(addr)
	if err != nil {
		return nil, nil, e.errorf("%v", err), false
	}
	id := fs.Arg(0)
	if self {
		if id, err = localNodeID(client, addr.Addr); err != nil {
			return nil, nil, e.errorf("%v", err), false
		}
	}
	if len(id) == 1 {
		return nil, nil, e.errorf("identifier must contain at least two characters"), false
	}
	nodes, _, err := client.Nodes().PrefixList(id)
	if err != nil {
		return nil, nil, e.errorf("failed to list nodes: %s", describe(err, addr.Addr)), false
	}
	switch len(nodes) {
	case 0:
		return nil, nil, e.errorf("no node(s) with prefix or id %q found", id), false
	case 1:
		return client, nodes[0], 0, true
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	return nil, nil, e.errorf("prefix %q matched multiple nodes: %s", id, strings.Join(ids, ", ")), false
}

// localNodeID is the ID of the agent's own client node: the one Nomad
// reports in the agent's stats, else the node named as the agent is.
func localNodeID(client *nomadapi.Client, addr string) (string, error) {
	self, err := client.Agent().Self()
	if err != nil {
		return "", fmt.Errorf("failed to query the agent: %s", describe(err, addr))
	}
	if id := self.Stats["client"]["node_id"]; id != "" {
		return id, nil
	}
	name, _ := self.Config["NodeName"].(string)
	nodes, _, err := client.Nodes().List(nil)
	if err != nil {
		return "", fmt.Errorf("failed to list nodes: %s", describe(err, addr))
	}
	var ids []string
	for _, n := range nodes {
		if name != "" && n.Name == name {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("cannot tell the agent's own node: %d nodes are named %q", len(ids), name)
	}
	return ids[0], nil
}

// drainTime formats a drain monitor's timestamps, as Nomad's formatTime.
func drainTime(t time.Time) string {
	return t.Format("2006-01-02T15:04:05Z07:00")
}
