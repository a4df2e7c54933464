package command

import (
	"fmt"
	"sort"
)

func init() {
	register(&command{
		name: "server members", args: "[options]", synopsis: "List the cluster's servers",
		help: `Lists the servers: name, RPC address and port, status (alive while the
server takes part in the leader election), whether it is the leader, its
etcd role (leader, follower, learner; "external" with an external etcd),
build, datacenter and region.`,
		example: "$ meshlet server members",
		run:     runServerMembers,
	}, &command{
		name: "server force-leave", args: "[options] NAME", synopsis: "Remove a dead server from the cluster",
		help: `Removes the etcd member of the server NAME (its node name) from the cluster,
as after a server was lost for good. Do this only for a server that is
gone: a running one would fail to reach its peers.`,
		example: "$ meshlet server force-leave s3",
		run:     runServerForceLeave,
	})
}

func runServerMembers(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "server members takes no arguments")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	members, err := client.Agent().Members()
	if err != nil {
		return e.errorf("failed to list servers: %s", describe(err, addr.Addr))
	}
	sort.Slice(members.Members, func(i, j int) bool { return members.Members[i].Name < members.Members[j].Name })
	rows := []string{row("Name", "Address", "Port", "Status", "Leader", "Etcd Role", "Build", "Datacenter", "Region")}
	for _, m := range members.Members {
		t := m.Tags
		rows = append(rows, row(m.Name, m.Addr, m.Port, m.Status, t["leader"], t["etcd_role"], t["build"], t["dc"], t["region"]))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

func runServerForceLeave(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return e.usageError(c, "expected one argument: the server's NAME")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if err := client.Agent().ForceLeave(fs.Arg(0)); err != nil {
		return e.errorf("failed to remove server %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	fmt.Fprintf(e.stdout, "Server %q removed from the cluster\n", fs.Arg(0))
	return exitOK
}
