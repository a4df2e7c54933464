package server

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// A system job runs on every node: node-1 at registration, a node that
// registers later at once (node registration evaluates every job), and a
// node that misses its heartbeat loses its allocation without a
// replacement elsewhere.
func TestSystemJobFollowsNodes(t *testing.T) {
	ctx := context.Background()
	s, _ := newServer(t)
	j := testJob("agent", "raw_exec", 1)
	j.Type = structs.JobTypeSystem
	if _, err := s.RegisterJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	live := func() map[string]int {
		t.Helper()
		allocs, err := s.JobAllocs(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, a := range allocs {
			if a.DesiredStatus == structs.AllocDesiredStatusRun {
				out[a.NodeID]++
			}
		}
		return out
	}
	if got := live(); len(got) != 1 || got["node-1"] != 1 {
		t.Fatalf("after registration: %v, want one on node-1", got)
	}
	n2 := &structs.Node{ID: "node-2", Name: "n2", Datacenter: "dc1", Drivers: map[string]*structs.DriverInfo{
		"raw_exec": {Detected: true, Healthy: true}}}
	if err := s.RegisterNode(ctx, n2); err != nil {
		t.Fatal(err)
	}
	if got := live(); len(got) != 2 || got["node-1"] != 1 || got["node-2"] != 1 {
		t.Fatalf("after node-2 joined: %v, want one on each node", got)
	}
	expireHeartbeat(s, "node-2")
	if got := live(); len(got) != 1 || got["node-1"] != 1 {
		t.Fatalf("after node-2 went down: %v, want only node-1's", got)
	}
	allocs, _ := s.JobAllocs(ctx, "agent")
	lost := 0
	for _, a := range allocs {
		if a.NodeID == "node-2" && a.ClientStatus == structs.AllocClientStatusLost {
			lost++
		}
	}
	if lost != 1 {
		t.Fatalf("node-2's allocation not marked lost: %+v", allocs)
	}
}
