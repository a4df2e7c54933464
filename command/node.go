package command

import (
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
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 || fs.NArg() == 1 && fs.Arg(0) == "" {
		return e.usageError(c, "expected at most one argument: a NODE ID")
	}
	client, err := nomadClient(*addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if fs.NArg() == 0 {
		nodes, _, err := client.Nodes().List(nil)
		if err != nil {
			return e.errorf("failed to list nodes: %s", describe(err, *addr))
		}
		rows := []string{row("ID", "DC", "Name", "Drain", "Eligibility", "Status")}
		for _, n := range nodes {
			rows = append(rows, row(short(n.ID), n.Datacenter, n.Name, n.Drain, n.SchedulingEligibility, n.Status))
		}
		writeTable(e.stdout, rows)
		return exitOK
	}
	node, _, err := client.Nodes().Info(fs.Arg(0), nil)
	if err != nil {
		return e.errorf("failed to query node %q: %s", fs.Arg(0), describe(err, *addr))
	}
	allocs, _, err := client.Nodes().Allocations(node.ID, nil)
	if err != nil {
		return e.errorf("failed to list allocations of node %q: %s", short(node.ID), describe(err, *addr))
	}
	writeNodeStatus(e, node, allocs)
	return exitOK
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
