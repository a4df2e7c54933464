package structs

import (
	"encoding/json"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

func TestTaskGroupCountDefault(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`{"Name":"g"}`, 1},
		{`{"Name":"g","Count":null}`, 1},
		{`{"Name":"g","Count":0}`, 0},
		{`{"Name":"g","Count":3}`, 3},
	}
	for _, tt := range tests {
		var tg TaskGroup
		if err := json.Unmarshal([]byte(tt.in), &tg); err != nil {
			t.Fatal(err)
		}
		if tg.Count != tt.want || tg.Name != "g" {
			t.Errorf("%s → Count %d Name %q, want %d", tt.in, tg.Count, tg.Name, tt.want)
		}
	}
	b, _ := json.Marshal(TaskGroup{Name: "g", Count: 0})
	var back TaskGroup
	if err := json.Unmarshal(b, &back); err != nil || back.Count != 0 {
		t.Fatalf("round trip of Count 0 = %d, %v", back.Count, err)
	}
}

// A Node encodes to the JSON shape of Nomad's /v1/node: the official
// client decodes every field the scheduler uses.
func TestNodeDecodesWithNomadAPI(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	n := &Node{ID: "id-1", Name: "n1", Datacenter: "dc2", NodeClass: "gpu", Status: NodeStatusReady,
		SchedulingEligibility: NodeSchedulingIneligible, Drain: true,
		DrainStrategy: &DrainStrategy{DrainSpec: DrainSpec{Deadline: time.Hour}, ForceDeadline: started.Add(time.Hour), StartedAt: started},
		NodeResources: &NodeResources{Cpu: NodeCpuResources{CpuShares: 8000, TotalCpuCores: 4},
			Memory: NodeMemoryResources{MemoryMB: 16384}, Disk: NodeDiskResources{DiskMB: 100000}},
		ReservedResources: &NodeReservedResources{Cpu: NodeReservedCpuResources{CpuShares: 500},
			Memory: NodeReservedMemoryResources{MemoryMB: 1024}, Networks: NodeReservedNetworkResources{ReservedHostPorts: "22"}},
		Meta: map[string]string{"rack": "r1"}}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var got nomadapi.Node
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("nomad/api cannot decode %s: %v", b, err)
	}
	if got.ID != "id-1" || got.Datacenter != "dc2" || got.NodeClass != "gpu" || got.Status != "ready" ||
		got.SchedulingEligibility != "ineligible" || !got.Drain || got.Meta["rack"] != "r1" {
		t.Errorf("decoded %+v", got)
	}
	if r := got.NodeResources; r == nil || r.Cpu.CpuShares != 8000 || r.Cpu.TotalCpuCores != 4 ||
		r.Memory.MemoryMB != 16384 || r.Disk.DiskMB != 100000 {
		t.Errorf("NodeResources = %+v", got.NodeResources)
	}
	if r := got.ReservedResources; r == nil || r.Cpu.CpuShares != 500 || r.Memory.MemoryMB != 1024 ||
		r.Networks.ReservedHostPorts != "22" {
		t.Errorf("ReservedResources = %+v", got.ReservedResources)
	}
	if d := got.DrainStrategy; d == nil || d.Deadline != time.Hour || !d.StartedAt.Equal(started) ||
		!d.ForceDeadline.Equal(started.Add(time.Hour)) {
		t.Errorf("DrainStrategy = %+v", got.DrainStrategy)
	}
}

func TestNodeStates(t *testing.T) {
	for _, tc := range []struct {
		n                        Node
		ready, eligible, drained bool
	}{
		{Node{}, true, true, false}, // older callers set neither
		{Node{Status: NodeStatusReady, SchedulingEligibility: NodeSchedulingEligible}, true, true, false},
		{Node{Status: NodeStatusDown}, false, true, false},
		{Node{Status: NodeStatusInit}, false, true, false},
		{Node{Status: NodeStatusDisconnected}, false, true, false},
		{Node{SchedulingEligibility: NodeSchedulingIneligible}, true, false, false},
		{Node{Drain: true}, true, true, true},
		{Node{DrainStrategy: &DrainStrategy{}}, true, true, true},
	} {
		if tc.n.Ready() != tc.ready || tc.n.Eligible() != tc.eligible || tc.n.Draining() != tc.drained {
			t.Errorf("%+v: ready %v eligible %v draining %v", tc.n, tc.n.Ready(), tc.n.Eligible(), tc.n.Draining())
		}
	}
}
