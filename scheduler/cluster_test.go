package scheduler

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// cnode is a ready raw_exec node in dc with cpu MHz and mem MB.
func cnode(name, dc string, cpu, mem int64, mutate ...func(*structs.Node)) *structs.Node {
	n := node(name, "raw_exec")
	n.Datacenter = dc
	n.SchedulingEligibility = structs.NodeSchedulingEligible
	n.NodeResources = &structs.NodeResources{Cpu: structs.NodeCpuResources{CpuShares: cpu},
		Memory: structs.NodeMemoryResources{MemoryMB: mem}}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func withMeta(k, v string) func(*structs.Node) {
	return func(n *structs.Node) { n.Meta = map[string]string{k: v} }
}

func withCons(group bool, cs ...*structs.Constraint) func(*structs.Job) {
	return func(j *structs.Job) {
		if group {
			j.TaskGroups[0].Constraints = cs
		} else {
			j.Constraints = cs
		}
	}
}

func withRes(cpu, mem int) func(*structs.Job) {
	return func(j *structs.Job) {
		j.TaskGroups[0].Tasks[0].Resources = &structs.Resources{CPU: &cpu, MemoryMB: &mem}
	}
}

var distinctHosts = &structs.Constraint{Operand: ConstraintDistinctHosts}

// perNode counts placements by node name: "n1=2,n2=2".
func perNode(allocs []*structs.Allocation) string {
	c := map[string]int{}
	for _, a := range allocs {
		c[a.NodeName]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		out = append(out, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(out, ",")
}

// perDC counts placements by the datacenter of their node.
func perDC(allocs []*structs.Allocation, nodes []*structs.Node) string {
	dc := map[string]string{}
	for _, n := range nodes {
		dc[n.ID] = n.Datacenter
	}
	c := map[string]int{}
	for _, a := range allocs {
		c[dc[a.NodeID]]++
	}
	return fmt.Sprintf("dc1=%d,dc2=%d", c["dc1"], c["dc2"])
}

func failureOf(p *Plan) string {
	if len(p.Failures) == 0 {
		return ""
	}
	f := p.Failures[0]
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f.Filtered)) {
		parts = append(parts, fmt.Sprintf("filtered %q=%d", k, f.Filtered[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Exhausted)) {
		parts = append(parts, fmt.Sprintf("exhausted %q=%d", k, f.Exhausted[k]))
	}
	return fmt.Sprintf("%d failed: %s", f.Count, strings.Join(parts, ", "))
}

func TestClusterPlacement(t *testing.T) {
	three := []*structs.Node{cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192), cnode("n3", "dc1", 4000, 8192)}
	racks := []*structs.Node{cnode("n1", "dc1", 4000, 8192, withMeta("rack", "r1")),
		cnode("n2", "dc1", 4000, 8192, withMeta("rack", "r1")), cnode("n3", "dc1", 4000, 8192, withMeta("rack", "r2"))}
	small := func(name string, cpu, mem int64) *structs.Node { return cnode(name, "dc1", cpu, mem) }
	tests := []struct {
		name        string
		job         *structs.Job
		nodes       []*structs.Node
		wantNodes   string // perNode of the placements
		wantFailure string // failureOf
	}{
		{name: "anti-affinity spreads count 6 over 3 nodes", job: job("a", 6), nodes: three, wantNodes: "n1=2,n2=2,n3=2"},
		{name: "distinct_hosts at job level", job: job("a", 4, withCons(false, distinctHosts)), nodes: three,
			wantNodes: "n1=1,n2=1,n3=1", wantFailure: `1 failed: filtered "distinct_hosts"=3`},
		{name: "distinct_hosts at group level", job: job("a", 4, withCons(true, distinctHosts)), nodes: three,
			wantNodes: "n1=1,n2=1,n3=1", wantFailure: `1 failed: filtered "distinct_hosts"=3`},
		{name: "distinct_property one per rack", nodes: racks,
			job:       job("a", 3, withCons(false, &structs.Constraint{LTarget: "${meta.rack}", Operand: ConstraintDistinctProperty})),
			wantNodes: "n1=1,n3=1",
			wantFailure: `1 failed: filtered "distinct_property: ${meta.rack}=r1 used by 1 allocs"=2, ` +
				`filtered "distinct_property: ${meta.rack}=r2 used by 1 allocs"=1`},
		{name: "distinct_property two per rack", nodes: racks,
			job: job("a", 5, withCons(true, &structs.Constraint{LTarget: "${meta.rack}", RTarget: "2",
				Operand: ConstraintDistinctProperty})),
			wantNodes: "n1=1,n2=1,n3=2",
			wantFailure: `1 failed: filtered "distinct_property: ${meta.rack}=r1 used by 2 allocs"=2, ` +
				`filtered "distinct_property: ${meta.rack}=r2 used by 2 allocs"=1`},
		{name: "distinct_property missing attribute", nodes: []*structs.Node{small("n1", 1000, 1000)},
			job:         job("a", 1, withCons(false, &structs.Constraint{LTarget: "${meta.rack}", Operand: ConstraintDistinctProperty})),
			wantFailure: `1 failed: filtered "missing property \"${meta.rack}\""=1`},
		{name: "memory exhausted", job: job("a", 2, withRes(100, 600)), nodes: []*structs.Node{small("n1", 4000, 1024)},
			wantNodes: "n1=1", wantFailure: `1 failed: exhausted "memory"=1`},
		{name: "cpu exhausted", job: job("a", 3, withRes(1500, 100)), nodes: []*structs.Node{small("n1", 4000, 8192)},
			wantNodes: "n1=2", wantFailure: `1 failed: exhausted "cpu"=1`},
		{name: "default resources count against capacity", job: job("a", 4), nodes: []*structs.Node{small("n1", 4000, 1000)},
			wantNodes: "n1=3", wantFailure: `1 failed: exhausted "memory"=1`},
		{name: "reserved resources are not allocatable", job: job("a", 1, withRes(100, 600)),
			nodes: []*structs.Node{cnode("n1", "dc1", 4000, 1024, func(n *structs.Node) {
				n.ReservedResources = &structs.NodeReservedResources{Memory: structs.NodeReservedMemoryResources{MemoryMB: 512}}
			})}, wantFailure: `1 failed: exhausted "memory"=1`},
		{name: "nodes without resources are unlimited", job: job("a", 50, withRes(100000, 100000)),
			nodes: []*structs.Node{node("n1", "raw_exec")}, wantNodes: "n1=50"},
		{name: "mixed reasons per node", job: job("a", 1, withRes(1000, 1000)),
			nodes: []*structs.Node{small("n1", 4000, 512), small("n2", 500, 8192), cnode("n3", "dc1", 4000, 8192, func(n *structs.Node) {
				n.Status = structs.NodeStatusDown
			})},
			wantFailure: `1 failed: filtered "node not ready"=1, exhausted "cpu"=1, exhausted "memory"=1`},
		{name: "unready, ineligible and draining nodes get nothing", job: job("a", 3),
			nodes: []*structs.Node{
				cnode("a-down", "dc1", 4000, 8192, func(n *structs.Node) { n.Status = structs.NodeStatusDown }),
				cnode("b-init", "dc1", 4000, 8192, func(n *structs.Node) { n.Status = structs.NodeStatusInit }),
				cnode("c-disc", "dc1", 4000, 8192, func(n *structs.Node) { n.Status = structs.NodeStatusDisconnected }),
				cnode("d-inel", "dc1", 4000, 8192, func(n *structs.Node) { n.SchedulingEligibility = structs.NodeSchedulingIneligible }),
				cnode("e-drain", "dc1", 4000, 8192, func(n *structs.Node) {
					n.Drain = true
					n.DrainStrategy = &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: time.Hour}, StartedAt: time.Unix(1, 0)}
					n.SchedulingEligibility = structs.NodeSchedulingIneligible
				}),
				small("z-ok", 4000, 8192),
			}, wantNodes: "z-ok=3"},
		{name: "all nodes unusable", job: job("a", 2),
			nodes: []*structs.Node{
				cnode("a-down", "dc1", 4000, 8192, func(n *structs.Node) { n.Status = structs.NodeStatusDown }),
				cnode("b-down", "dc1", 4000, 8192, func(n *structs.Node) { n.Status = structs.NodeStatusDisconnected }),
				cnode("d-inel", "dc1", 4000, 8192, func(n *structs.Node) { n.SchedulingEligibility = structs.NodeSchedulingIneligible }),
				cnode("e-drain", "dc1", 4000, 8192, func(n *structs.Node) { n.DrainStrategy = &structs.DrainStrategy{} }),
			}, wantFailure: `2 failed: filtered "node draining"=1, filtered "node ineligible"=1, filtered "node not ready"=2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newTest(t, 20000, 32000).Process(tc.job, nil, tc.nodes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := perNode(p.Place); got != tc.wantNodes {
				t.Errorf("placements = %q, want %q", got, tc.wantNodes)
			}
			if got := failureOf(p); got != tc.wantFailure {
				t.Errorf("failure = %s\nwant      %s", got, tc.wantFailure)
			}
			if len(p.Failures) > 0 && p.Failures[0].NodesEvaluated != len(tc.nodes) {
				t.Errorf("NodesEvaluated = %d, want %d", p.Failures[0].NodesEvaluated, len(tc.nodes))
			}
		})
	}
}

// Job-level distinct_hosts keeps every group of the job apart; at group
// level two groups may share a node.
func TestDistinctHostsScope(t *testing.T) {
	twoGroups := func(group bool) *structs.Job {
		j := job("a", 1, withCons(group, distinctHosts))
		g2 := *j.TaskGroups[0]
		g2.Name = "api"
		j.TaskGroups = append(j.TaskGroups, &g2)
		return j
	}
	one := []*structs.Node{cnode("n1", "dc1", 4000, 8192)}
	s := newTest(t, 20000, 32000)
	p, err := s.Process(twoGroups(true), nil, one, Options{})
	if err != nil || len(p.Place) != 2 || len(p.Failures) != 0 {
		t.Fatalf("group-level distinct_hosts: %v, placed %d, %s", err, len(p.Place), failureOf(p))
	}
	p, err = s.Process(twoGroups(false), nil, one, Options{})
	if err != nil || len(p.Place) != 1 || failureOf(p) != `1 failed: filtered "distinct_hosts"=1` {
		t.Fatalf("job-level distinct_hosts: %v, placed %d, %s", err, len(p.Place), failureOf(p))
	}
	// Another job on the node does not count.
	other := existing(t, s, job("x", 1), one[0])
	p, err = s.Process(job("a", 1, withCons(false, distinctHosts)), other, one, Options{})
	if err != nil || len(p.Place) != 1 {
		t.Fatalf("another job's allocation blocked distinct_hosts: %v %s", err, failureOf(p))
	}
}

// A new version replaces every allocation of a distinct_hosts job: the
// stopped ones free their nodes for their replacements.
func TestDistinctHostsReplacement(t *testing.T) {
	nodes := []*structs.Node{cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192), cnode("n3", "dc1", 4000, 8192)}
	s := newTest(t, 20000, 32000)
	v0 := job("a", 3, withCons(false, distinctHosts))
	p, err := s.Process(v0, nil, nodes, Options{})
	if err != nil || perNode(p.Place) != "n1=1,n2=1,n3=1" {
		t.Fatalf("first placement: %v %s", err, perNode(p.Place))
	}
	prev := p.Place
	v1 := job("a", 3, withCons(false, distinctHosts), func(j *structs.Job) { j.Version = 1; j.Meta = map[string]string{"v": "1"} })
	p, err = s.Process(v1, prev, nodes, Options{})
	if err != nil || len(p.Stop) != 3 || perNode(p.Place) != "n1=1,n2=1,n3=1" || len(p.Failures) != 0 {
		t.Fatalf("replacement: %v stop %d place %s %s", err, len(p.Stop), perNode(p.Place), failureOf(p))
	}
}

// Binpack: with no anti-affinity between them (two jobs), the second job
// goes to the node the first one made fuller, not to the first by name.
func TestBinpackPrefersFullerNode(t *testing.T) {
	n1, n2 := cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192)
	s := newTest(t, 20000, 32000)
	p, err := s.Process(job("x", 1, withRes(1000, 2048)), nil, []*structs.Node{n2}, Options{})
	if err != nil || len(p.Place) != 1 {
		t.Fatalf("setup: %v %s", err, failureOf(p))
	}
	allocs := p.Place
	p, err = s.Process(job("y", 1, withRes(500, 512)), allocs, []*structs.Node{n1, n2}, Options{})
	if err != nil || perNode(p.Place) != "n2=1" {
		t.Fatalf("placed %q, want n2 (the fuller node): %v", perNode(p.Place), err)
	}
	// Once the fuller node has no room, the other one is used.
	allocs = append(allocs, p.Place...)
	p, err = s.Process(job("z", 1, withRes(2600, 512)), allocs, []*structs.Node{n1, n2}, Options{})
	if err != nil || perNode(p.Place) != "n1=1" {
		t.Fatalf("placed %q, want n1 (n2 is full): %v", perNode(p.Place), err)
	}
}

func TestSpread(t *testing.T) {
	nodes := []*structs.Node{cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192), cnode("n3", "dc2", 4000, 8192)}
	dcs := func(j *structs.Job) { j.Datacenters = []string{"dc1", "dc2"} }
	spread := func(weight int, targets ...*structs.SpreadTarget) func(*structs.Job) {
		return func(j *structs.Job) {
			j.Spreads = []*structs.Spread{{Attribute: "${node.datacenter}", Weight: &weight, SpreadTarget: targets}}
		}
	}
	tests := []struct {
		name  string
		job   *structs.Job
		want  string
		nodes string
	}{
		// Without spread, anti-affinity spreads over nodes: 2 of 3 are in dc1.
		{"no spread", job("a", 4, dcs), "dc1=3,dc2=1", "n1=2,n2=1,n3=1"},
		{"targets 50/50", job("a", 4, dcs, spread(100, &structs.SpreadTarget{Value: "dc1", Percent: 50},
			&structs.SpreadTarget{Value: "dc2", Percent: 50})), "dc1=2,dc2=2", "n1=1,n2=1,n3=2"},
		// Nomad's score is the mean of the scores: n1's second allocation
		// (anti-affinity and even-spread penalties, fuller) still edges
		// out n2 (spread penalty only).
		{"even spread without targets", job("a", 4, dcs, spread(100)), "dc1=2,dc2=2", "n1=2,n3=2"},
		{"implicit target for the rest", job("a", 4, dcs, spread(100, &structs.SpreadTarget{Value: "dc1", Percent: 25})),
			"dc1=1,dc2=3", "n1=1,n3=3"},
		{"group-level spread", job("a", 4, dcs, func(j *structs.Job) {
			j.TaskGroups[0].Spreads = []*structs.Spread{{Attribute: "${node.datacenter}",
				SpreadTarget: []*structs.SpreadTarget{{Value: "dc1", Percent: 50}, {Value: "dc2", Percent: 50}}}}
		}), "dc1=2,dc2=2", "n1=1,n2=1,n3=2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newTest(t, 20000, 32000).Process(tc.job, nil, nodes, Options{})
			if err != nil || len(p.Failures) != 0 {
				t.Fatalf("%v %s", err, failureOf(p))
			}
			if got := perDC(p.Place, nodes); got != tc.want {
				t.Errorf("per datacenter %s, want %s", got, tc.want)
			}
			if got := perNode(p.Place); got != tc.nodes {
				t.Errorf("per node %s, want %s", got, tc.nodes)
			}
		})
	}
}

// A node missing a spread's attribute scores -1 for that spread, as in
// Nomad's SpreadIterator: with or without targets, the nodes that have
// the attribute are preferred, even the one listed after it.
func TestSpreadNodeMissingAttribute(t *testing.T) {
	nodes := []*structs.Node{cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192, withMeta("rack", "r1")),
		cnode("n3", "dc1", 4000, 8192, withMeta("rack", "r2"))}
	spread := func(targets ...*structs.SpreadTarget) func(*structs.Job) {
		return func(j *structs.Job) {
			j.Spreads = []*structs.Spread{{Attribute: "${meta.rack}", SpreadTarget: targets}}
		}
	}
	for _, tc := range []struct {
		name string
		job  *structs.Job
	}{
		{"targets", job("a", 2, spread(&structs.SpreadTarget{Value: "r1", Percent: 50}, &structs.SpreadTarget{Value: "r2", Percent: 50}))},
		{"even spread", job("a", 2, spread())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newTest(t, 20000, 32000).Process(tc.job, nil, nodes, Options{})
			if err != nil || len(p.Failures) != 0 {
				t.Fatalf("%v %s", err, failureOf(p))
			}
			if got := perNode(p.Place); got != "n2=1,n3=1" {
				t.Errorf("per node %s, want n2=1,n3=1 (n1 has no meta.rack)", got)
			}
		})
	}
	// With no room elsewhere the node is still feasible: spread ranks, it
	// does not filter.
	p, err := newTest(t, 20000, 32000).Process(job("a", 4, spread()), nil, nodes[:1], Options{})
	if err != nil || perNode(p.Place) != "n1=4" {
		t.Fatalf("only n1 (no meta.rack): placed %q, %v %s; want n1=4", perNode(p.Place), err, failureOf(p))
	}
}

// A rescheduled allocation avoids the node it failed on when another one
// can take it.
func TestRescheduleAvoidsFailedNode(t *testing.T) {
	nodes := []*structs.Node{cnode("n1", "dc1", 4000, 8192), cnode("n2", "dc1", 4000, 8192)}
	s := newTest(t, 20000, 32000)
	j := job("a", 1)
	p, err := s.Process(j, nil, nodes, Options{})
	if err != nil || perNode(p.Place) != "n1=1" {
		t.Fatalf("setup: %v %s", err, perNode(p.Place))
	}
	failed := p.Place[0]
	failed.ClientStatus = structs.AllocClientStatusFailed
	p, err = s.Process(j, []*structs.Allocation{failed}, nodes, Options{ForceReschedule: true})
	if err != nil || perNode(p.Place) != "n2=1" || p.Place[0].PreviousAllocation != failed.ID {
		t.Fatalf("replacement placed %q, want n2: %v", perNode(p.Place), err)
	}
}

func TestScores(t *testing.T) {
	capacity := resources{cpu: 1000, mem: 1000, cpuLimit: true, memLimit: true}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		after resources
		want  float64
	}{
		{resources{}, 0},                     // 20 - (10+10) = 0
		{resources{cpu: 1000, mem: 1000}, 1}, // 20 - (1+1) = 18 → 1
		{resources{cpu: 500, mem: 500}, (20 - 2*math.Pow(10, 0.5)) / 18},
		{resources{cpu: 1000}, (20 - 1 - 10) / 18.0},
	} {
		if got := binpackScore(capacity, tc.after); !near(got, tc.want) {
			t.Errorf("binpackScore(%+v) = %v, want %v", tc.after, got, tc.want)
		}
	}
	if got := binpackScore(resources{}, resources{cpu: 5000, mem: 5000}); got != 0 {
		t.Errorf("unlimited node binpack = %v, want 0", got)
	}
	if got := antiAffinityScore(1, 6); !near(got, -2.0/6) {
		t.Errorf("antiAffinityScore(1, 6) = %v", got)
	}
	for _, tc := range []struct {
		used map[string]int
		v    string
		want float64
	}{
		{nil, "a", 0},
		{map[string]int{"a": 1}, "b", 1},
		{map[string]int{"a": 1, "b": 1}, "a", -1},
		{map[string]int{"a": 2, "b": 1}, "a", -1},
		{map[string]int{"a": 3, "b": 1}, "b", 2},
	} {
		if got := evenSpreadBoost(tc.used, tc.v); !near(got, tc.want) {
			t.Errorf("evenSpreadBoost(%v, %s) = %v, want %v", tc.used, tc.v, got, tc.want)
		}
	}
}

// Allocations on a down, disconnected or deregistered node are lost: the
// plan stops them as lost and places replacements on live nodes; with no
// room elsewhere they are still marked lost.
func TestLostAllocsAreReplaced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    string // of n1; "gone": n1 not in the node list
		others    int    // live nodes besides n1
		wantNodes string
		wantFail  string
	}{
		{"down node", structs.NodeStatusDown, 1, "n2=2", ""},
		{"disconnected node", structs.NodeStatusDisconnected, 2, "n2=1,n3=1", ""},
		{"deregistered node", "gone", 1, "n2=2", ""},
		{"no node left", structs.NodeStatusDown, 0, "", `2 failed: filtered "node not ready"=1`},
		{"ready node keeps its allocations", structs.NodeStatusReady, 1, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTest(t, 20000, 32000)
			n1 := cnode("n1", "dc1", 4000, 8192)
			j := job("a", 2)
			prev := existing(t, s, j, n1)
			nodes := []*structs.Node{n1}
			for i := 0; i < tc.others; i++ {
				nodes = append(nodes, cnode(fmt.Sprintf("n%d", i+2), "dc1", 4000, 8192))
			}
			switch tc.status {
			case "gone":
				nodes = nodes[1:]
			default:
				n1.Status = tc.status
			}
			p, err := s.Process(j, prev, nodes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := perNode(p.Place); got != tc.wantNodes {
				t.Errorf("placements %q, want %q", got, tc.wantNodes)
			}
			if got := failureOf(p); got != tc.wantFail {
				t.Errorf("failure %s, want %s", got, tc.wantFail)
			}
			if tc.status == structs.NodeStatusReady {
				if len(p.Stop) != 0 {
					t.Errorf("stopped %d allocations on a ready node", len(p.Stop))
				}
				return
			}
			if len(p.Stop) != 2 {
				t.Fatalf("stopped %d, want the 2 lost allocations", len(p.Stop))
			}
			for _, a := range p.Stop {
				if a.ClientStatus != structs.AllocClientStatusLost || a.DesiredStatus != structs.AllocDesiredStatusStop ||
					a.DesiredDescription != DescAllocLost || (len(p.Place) > 0 && a.NextAllocation == "") {
					t.Errorf("lost alloc %s: client %q desired %q (%q) next %q", a.Name, a.ClientStatus, a.DesiredStatus,
						a.DesiredDescription, a.NextAllocation)
				}
			}
		})
	}
}

// A new job version whose groups did not change is applied in place only
// where the allocation's node still satisfies the job's datacenters and
// constraints, as Nomad re-checks the node before an in-place update:
// elsewhere the allocation is replaced (service) or stopped (system).
func TestJobLevelPlacementChangeMovesAllocs(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n1, n2 := cnode("n1", "dc1", 4000, 4000), cnode("n2", "dc2", 4000, 4000)
	nodes := []*structs.Node{n1, n2}
	for _, tc := range []struct {
		name   string
		change func(*structs.Job)
	}{
		{"datacenters", func(j *structs.Job) { j.Datacenters = []string{"dc2"} }},
		{"job constraint", withCons(false, &structs.Constraint{LTarget: "${node.datacenter}", Operand: "=", RTarget: "dc2"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bothDCs := func(j *structs.Job) { j.Datacenters = []string{"dc1", "dc2"} }
			v0 := job("a", 1, bothDCs)
			p, err := s.Process(v0, nil, []*structs.Node{n1}, Options{})
			if err != nil || len(p.Place) != 1 {
				t.Fatalf("setup: %v %+v", err, p)
			}
			allocs := settle(p, 1)
			v1 := job("a", 1, bothDCs, tc.change, func(j *structs.Job) { j.Version = 1 })
			p, err = s.Process(v1, allocs, nodes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Update) != 0 || perNode(p.Place) != "n2=1" || len(p.Stop) != 1 || p.Stop[0].DesiredDescription != DescJobUpdated {
				t.Fatalf("updated %v, placed %s, stopped %v; want the n1 allocation replaced on n2",
					names(p.Update), perNode(p.Place), names(p.Stop))
			}

			sys := systemJob(structs.JobTypeSystem, bothDCs)
			p, _ = s.Process(sys, nil, nodes, Options{})
			allocs = settle(p, 1)
			sys1 := systemJob(structs.JobTypeSystem, bothDCs, tc.change, func(j *structs.Job) { j.Version = 1 })
			p, _ = s.Process(sys1, allocs, nodes, Options{})
			if len(p.Place) != 0 || len(p.Update) != 1 || p.Update[0].NodeName != "n2" || len(p.Stop) != 1 || p.Stop[0].NodeName != "n1" {
				t.Fatalf("system: placed %s, updated %s, stopped %s; want n2's updated in place and n1's stopped",
					perNode(p.Place), perNode(p.Update), perNode(p.Stop))
			}
		})
	}
}
