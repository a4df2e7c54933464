package rpc

import (
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// Instance IDs key every agent's catalog across nodes: a node may not
// register an instance under an ID of another allocation (another node's
// instance, which every mirror, that node's own catalog included, would
// replace with the intruder's), nor an ID outside its allocation's
// ("_nomad-task-<alloc>-…", as connect names them).
func TestConnectPutAllocInstanceIDsOfTheAllocation(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	job := &structs.Job{ID: "web", TaskGroups: []*structs.TaskGroup{{Name: "g",
		Services: []*structs.Service{{Name: "web"}},
		Tasks:    []*structs.Task{{Name: "t", Services: []*structs.Service{{Name: "web-admin"}}}}}}}
	const a1, a2 = "4b4e1b34-0b0b-4d8e-9c39-1f4a2c3e5d01", "4b4e1b34-0b0b-4d8e-9c39-1f4a2c3e5d02"
	m.b.addAlloc(&structs.Allocation{ID: a1, NodeID: "node-1", Job: job, TaskGroup: "g"})
	m.b.addAlloc(&structs.Allocation{ID: a2, NodeID: "node-2", Job: job, TaskGroup: "g"})
	victim := inst("node-2", a2, "web")
	m.f.set("node-2", a2, []catalog.ServiceInstance{victim})

	// What connect makes for a1 is accepted.
	group, task := inst("node-1", a1, "web"), inst("node-1", a1, "web-admin")
	task.ID = connect.TaskServiceID(a1, "t", "web-admin", "http")
	proxy := proxyInst("node-1", a1, "web")
	if err := m.c.PutAllocServices(ctx, a1, []catalog.ServiceInstance{group, task, proxy}); err != nil {
		t.Fatalf("instances named as connect names them refused: %v", err)
	}
	for _, tc := range []struct{ name, id string }{
		{"another node's instance ID", victim.ID},
		{"another node's proxy ID", connect.ProxyID(victim.ID)},
		{"an ID outside the allocation", "web-1"},
		{"an allocation ID prefix only", "_nomad-task-" + a1},
		{"another allocation's ID sharing a prefix", "_nomad-task-" + a1[:20] + "-group-g-web-http"},
	} {
		bad := inst("node-1", a1, "web")
		bad.ID = tc.id
		err := m.c.PutAllocServices(ctx, a1, []catalog.ServiceInstance{bad})
		wantErr(t, tc.name, err, ErrForbidden)
		if err != nil && !strings.Contains(err.Error(), tc.id) {
			t.Errorf("%s: error %q does not name the ID", tc.name, err)
		}
	}
	if got, _ := m.f.reg("node-1", a1); len(got) != 3 {
		t.Fatalf("node-1/%s holds %d instances after the refusals, want the 3 accepted", a1, len(got))
	}
}
