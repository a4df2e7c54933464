package taskrunner

import (
	"testing"

	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/structs"
)

// A task in its allocation's namespace gets the group network's hostname,
// interpolated; a group without one gives none.
func TestNetworkHostname(t *testing.T) {
	task := &structs.Task{Name: "web"}
	group := &structs.TaskGroup{Name: "g", Tasks: []*structs.Task{task}}
	alloc := &structs.Allocation{ID: "alloc-1", TaskGroup: "g", Job: &structs.Job{ID: "j", TaskGroups: []*structs.TaskGroup{group}}}
	env := taskenv.NewBuilder(nil, alloc, task).Build()
	if got := networkHostname(alloc, env); got != "" {
		t.Errorf("no network: hostname %q", got)
	}
	group.Networks = []*structs.NetworkResource{{Mode: "bridge", Hostname: "web-${NOMAD_ALLOC_ID}"}}
	if got := networkHostname(alloc, env); got != "web-alloc-1" {
		t.Errorf("hostname = %q, want web-alloc-1", got)
	}
	if got := networkHostname(alloc, nil); got != "web-${NOMAD_ALLOC_ID}" {
		t.Errorf("without env: hostname = %q", got)
	}
}
