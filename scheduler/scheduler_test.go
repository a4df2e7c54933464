package scheduler

import (
	"sort"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

func node(name string, drivers ...string) *structs.Node {
	n := &structs.Node{ID: "id-" + name, Name: name, Datacenter: "dc1", Status: structs.NodeStatusReady,
		Attributes: map[string]string{"kernel.name": "linux"}, Drivers: map[string]*structs.DriverInfo{}}
	for _, d := range drivers {
		n.Drivers[d] = &structs.DriverInfo{Detected: true, Healthy: true}
	}
	return n
}

func job(id string, count int, mutate ...func(*structs.Job)) *structs.Job {
	j := &structs.Job{ID: id, Name: id, Namespace: "default", Type: structs.JobTypeService, Datacenters: []string{"dc1"},
		TaskGroups: []*structs.TaskGroup{{Name: "web", Count: count,
			Tasks: []*structs.Task{{Name: "app", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	for _, m := range mutate {
		m(j)
	}
	return j
}

func withPorts(static []int, dynamic ...string) func(*structs.Job) {
	return func(j *structs.Job) {
		nw := &structs.NetworkResource{Mode: "host"}
		for i, p := range static {
			nw.ReservedPorts = append(nw.ReservedPorts, structs.Port{Label: "s" + string(rune('a'+i)), Value: p})
		}
		for _, l := range dynamic {
			nw.DynamicPorts = append(nw.DynamicPorts, structs.Port{Label: l, To: -1})
		}
		j.TaskGroups[0].Networks = []*structs.NetworkResource{nw}
	}
}

// existing places job on n with the given indexes, as a previous plan would have.
func existing(t *testing.T, s *Generic, j *structs.Job, n *structs.Node) []*structs.Allocation {
	t.Helper()
	p, err := s.Process(j, nil, []*structs.Node{n}, Options{})
	if err != nil || len(p.Failures) > 0 {
		t.Fatalf("setup placement failed: %v %+v", err, p)
	}
	for i, a := range p.Place {
		a.CreateIndex = uint64(i + 1)
	}
	return p.Place
}

func names(allocs []*structs.Allocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, a.Name)
	}
	sort.Strings(out)
	return out
}

func newTest(t *testing.T, lo, hi int) *Generic {
	t.Helper()
	s, err := New(Config{MinDynamicPort: lo, MaxDynamicPort: hi, Rand: func(int) int { return 0 }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestProcess(t *testing.T) {
	n1 := node("n1", "raw_exec", "exec")
	tests := []struct {
		name string
		// prev is placed first (on n1); cur is then planned against it.
		prev       *structs.Job
		cur        *structs.Job
		nodes      []*structs.Node
		wantPlace  []string
		wantStop   []string
		wantUpdate []string
		wantReason string
		check      func(t *testing.T, p *Plan, prev []*structs.Allocation)
	}{
		{name: "new job places one alloc per count", cur: job("a", 2), nodes: []*structs.Node{n1},
			wantPlace: []string{"a.web[0]", "a.web[1]"},
			check: func(t *testing.T, p *Plan, _ []*structs.Allocation) {
				for _, a := range p.Place {
					if a.NodeID != n1.ID || a.NodeName != "n1" || a.DesiredStatus != "run" || a.ClientStatus != "pending" || len(a.ID) != 36 {
						t.Errorf("bad placement %+v", a)
					}
				}
			}},
		{name: "job stop stops everything", prev: job("a", 2), cur: job("a", 2, func(j *structs.Job) { j.Stop = true }),
			nodes: []*structs.Node{n1}, wantStop: []string{"a.web[0]", "a.web[1]"},
			check: func(t *testing.T, p *Plan, _ []*structs.Allocation) {
				for _, a := range p.Stop {
					if a.DesiredStatus != "stop" || a.DesiredDescription != DescJobStopped {
						t.Errorf("bad stop %+v", a)
					}
				}
			}},
		{name: "spec change replaces", prev: job("a", 1),
			cur:   job("a", 1, func(j *structs.Job) { j.Version = 1; j.TaskGroups[0].Tasks[0].Config["command"] = "/bin/false" }),
			nodes: []*structs.Node{n1}, wantPlace: []string{"a.web[0]"}, wantStop: []string{"a.web[0]"},
			check: func(t *testing.T, p *Plan, prev []*structs.Allocation) {
				if p.Place[0].PreviousAllocation != prev[0].ID || p.Stop[0].NextAllocation != p.Place[0].ID {
					t.Errorf("replacement not linked: prev %q next %q", p.Place[0].PreviousAllocation, p.Stop[0].NextAllocation)
				}
			}},
		{name: "count down stops highest indexes", prev: job("a", 3), cur: job("a", 1, func(j *structs.Job) { j.Version = 1 }),
			nodes: []*structs.Node{n1}, wantStop: []string{"a.web[1]", "a.web[2]"}, wantUpdate: []string{"a.web[0]"}},
		{name: "count up adds indexes and updates in place", prev: job("a", 1), cur: job("a", 3, func(j *structs.Job) { j.Version = 1 }),
			nodes: []*structs.Node{n1}, wantPlace: []string{"a.web[1]", "a.web[2]"}, wantUpdate: []string{"a.web[0]"},
			check: func(t *testing.T, p *Plan, _ []*structs.Allocation) {
				if p.Update[0].Job.Version != 1 {
					t.Errorf("in-place update kept old job version %d", p.Update[0].Job.Version)
				}
			}},
		{name: "unchanged job is a no-op", prev: job("a", 2), cur: job("a", 2), nodes: []*structs.Node{n1}},
		{name: "removed group is stopped", prev: job("a", 1),
			cur:   job("a", 1, func(j *structs.Job) { j.Version = 1; j.TaskGroups[0].Name = "api" }),
			nodes: []*structs.Node{n1}, wantPlace: []string{"a.api[0]"}, wantStop: []string{"a.web[0]"}},
		{name: "missing driver fails placement", cur: job("a", 2, func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Driver = "docker" }),
			nodes: []*structs.Node{n1}, wantReason: "driver docker not available on node n1",
			check: func(t *testing.T, p *Plan, _ []*structs.Allocation) {
				if p.Failures[0].Count != 2 || p.Failures[0].Group != "web" || p.Failures[0].Filtered["driver docker not available on node n1"] != 1 {
					t.Errorf("failure = %+v", p.Failures[0])
				}
			}},
		{name: "unhealthy driver fails placement", cur: job("a", 1, func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Driver = "exec" }),
			nodes: []*structs.Node{func() *structs.Node {
				n := node("n2", "exec")
				n.Drivers["exec"].Healthy = false
				n.Drivers["exec"].HealthDescription = "cgroups unavailable"
				return n
			}()}, wantReason: "driver exec unhealthy on node n2: cgroups unavailable"},
		{name: "no nodes", cur: job("a", 1), wantReason: "no nodes registered"},
		{name: "datacenter mismatch", cur: job("a", 1, func(j *structs.Job) { j.Datacenters = []string{"eu-*"} }),
			nodes: []*structs.Node{n1}, wantReason: `node n1 is in datacenter "dc1", job wants [eu-*]`},
		{name: "datacenter wildcard", cur: job("a", 1, func(j *structs.Job) { j.Datacenters = []string{"*"} }),
			nodes: []*structs.Node{n1}, wantPlace: []string{"a.web[0]"}},
		{name: "constraint filters", cur: job("a", 1, func(j *structs.Job) {
			j.Constraints = []*structs.Constraint{{LTarget: "${attr.kernel.name}", RTarget: "windows", Operand: "="}}
		}), nodes: []*structs.Node{n1}, wantReason: "constraint ${attr.kernel.name} = windows not satisfied on node n1"},
		{name: "constraint satisfied", cur: job("a", 1, func(j *structs.Job) {
			j.Constraints = []*structs.Constraint{{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="}}
		}), nodes: []*structs.Node{n1}, wantPlace: []string{"a.web[0]"}},
		{name: "picks the feasible node", cur: job("a", 1, func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Driver = "exec" }),
			nodes: []*structs.Node{node("a-raw", "raw_exec"), node("b-exec", "exec")}, wantPlace: []string{"a.web[0]"},
			check: func(t *testing.T, p *Plan, _ []*structs.Allocation) {
				if p.Place[0].NodeName != "b-exec" {
					t.Errorf("placed on %s", p.Place[0].NodeName)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTest(t, 20000, 32000)
			var prev []*structs.Allocation
			if tc.prev != nil {
				prev = existing(t, s, tc.prev, n1)
			}
			p, err := s.Process(tc.cur, prev, tc.nodes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for what, pair := range map[string][2][]string{
				"place":  {names(p.Place), tc.wantPlace},
				"stop":   {names(p.Stop), tc.wantStop},
				"update": {names(p.Update), tc.wantUpdate},
			} {
				if strings.Join(pair[0], ",") != strings.Join(pair[1], ",") {
					t.Errorf("%s = %v, want %v", what, pair[0], pair[1])
				}
			}
			if tc.wantReason != "" {
				if len(p.Failures) != 1 || strings.Join(p.Failures[0].Reasons(), "|") != tc.wantReason {
					t.Fatalf("failures = %+v, want reason %q", p.Failures, tc.wantReason)
				}
			} else if len(p.Failures) != 0 {
				t.Fatalf("unexpected failures: %v", p.Failures[0].Reasons())
			}
			if tc.check != nil {
				tc.check(t, p, prev)
			}
		})
	}
}

// reservedNode is n1 with reserved ports (meshlet.reserved_ports).
func reservedNode(spec string) *structs.Node {
	n := node("n1", "raw_exec")
	n.Attributes[ReservedPortsAttribute] = spec
	return n
}

func TestPorts(t *testing.T) {
	n1 := node("n1", "raw_exec")
	tests := []struct {
		name       string
		lo, hi     int
		other      *structs.Job // placed first, another job
		cur        *structs.Job
		wantReason string
		wantPorts  map[string]int
		node       *structs.Node // default n1
	}{
		{name: "static and dynamic assigned", lo: 20000, hi: 20005, cur: job("a", 1, withPorts([]int{9002}, "http")),
			wantPorts: map[string]int{"sa": 9002, "http": 20000}},
		{name: "static conflict names holder", lo: 20000, hi: 20005, other: job("x", 1, withPorts([]int{9002})),
			cur: job("a", 1, withPorts([]int{9002})), wantReason: "port 9002 already in use by allocation <other> (job x)"},
		{name: "dynamic avoids used", lo: 20000, hi: 20002, other: job("x", 1, withPorts(nil, "p", "q")),
			cur: job("a", 1, withPorts(nil, "http")), wantPorts: map[string]int{"http": 20002}},
		{name: "dynamic avoids static of others", lo: 20000, hi: 20001, other: job("x", 1, withPorts([]int{20000})),
			cur: job("a", 1, withPorts(nil, "http")), wantPorts: map[string]int{"http": 20001}},
		{name: "dynamic exhausted", lo: 20000, hi: 20001, other: job("x", 1, withPorts(nil, "p", "q")),
			cur: job("a", 1, withPorts(nil, "http")), wantReason: "no free dynamic port in range 20000-20001 on node n1"},
		{name: "dynamic skips the node's reserved ports", lo: 20000, hi: 20003, node: reservedNode("20000-20001,20003"),
			cur: job("a", 1, withPorts(nil, "http")), wantPorts: map[string]int{"http": 20002}},
		{name: "reserved ports exhaust the range", lo: 20000, hi: 20001, node: reservedNode("20000-20001"),
			cur: job("a", 1, withPorts(nil, "http")), wantReason: "no free dynamic port in range 20000-20001 on node n1"},
		{name: "count 2 with static port conflicts with itself", lo: 20000, hi: 20005, cur: job("a", 2, withPorts([]int{9002})),
			wantReason: "port 9002 already in use by allocation <self> (job a)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTest(t, tc.lo, tc.hi)
			n := n1
			if tc.node != nil {
				n = tc.node
			}
			var others []*structs.Allocation
			if tc.other != nil {
				others = existing(t, s, tc.other, n)
			}
			p, err := s.Process(tc.cur, others, []*structs.Node{n}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantReason != "" {
				want := tc.wantReason
				if len(others) > 0 {
					want = strings.ReplaceAll(want, "<other>", others[0].ID)
				}
				if len(p.Place) > 0 {
					want = strings.ReplaceAll(want, "<self>", p.Place[0].ID)
				}
				if len(p.Failures) != 1 || p.Failures[0].Reasons()[0] != want {
					t.Fatalf("failures = %+v, want %q", p.Failures, want)
				}
				return
			}
			if len(p.Place) != 1 {
				t.Fatalf("placed %d", len(p.Place))
			}
			res := p.Place[0].AllocatedResources
			got := map[string]int{}
			for _, pm := range res.Shared.Ports {
				got[pm.Label] = pm.Value
				if pm.HostIP != "127.0.0.1" || pm.To != pm.Value {
					t.Errorf("port mapping %+v: want HostIP 127.0.0.1 and To resolved to Value", pm)
				}
			}
			for l, v := range tc.wantPorts {
				if got[l] != v {
					t.Errorf("port %s = %d, want %d (all %v)", l, got[l], v, got)
				}
			}
			nw := res.Shared.Networks[0]
			if len(nw.ReservedPorts)+len(nw.DynamicPorts) != len(tc.wantPorts) {
				t.Errorf("networks not written: %+v", nw)
			}
			for _, dp := range nw.DynamicPorts {
				if dp.Value == 0 {
					t.Errorf("dynamic port %s left unassigned in Networks", dp.Label)
				}
			}
			for _, np := range append(append([]structs.Port(nil), nw.ReservedPorts...), nw.DynamicPorts...) {
				if np.To != np.Value {
					t.Errorf("Networks port %+v: want To resolved to Value", np)
				}
			}
		})
	}
}

func TestReplacementReusesStaticPortAndTerminalAllocsFreePorts(t *testing.T) {
	n1 := node("n1", "raw_exec")
	s := newTest(t, 20000, 20010)
	prev := existing(t, s, job("a", 1, withPorts([]int{9002})), n1)
	cur := job("a", 1, withPorts([]int{9002}), func(j *structs.Job) { j.Version = 1; j.Meta = map[string]string{"v": "2"} })
	p, err := s.Process(cur, prev, []*structs.Node{n1}, Options{})
	if err != nil || len(p.Failures) != 0 || len(p.Place) != 1 || len(p.Stop) != 1 {
		t.Fatalf("replacement with the same static port failed: %v %+v", err, p)
	}
	other := existing(t, s, job("x", 1, withPorts([]int{9003})), n1)
	other[0].ClientStatus = structs.AllocClientStatusComplete
	p, err = s.Process(job("b", 1, withPorts([]int{9003})), other, []*structs.Node{n1}, Options{})
	if err != nil || len(p.Failures) != 0 {
		t.Fatalf("terminal allocation still holds its port: %v %+v", err, p.Failures)
	}
}

func TestNewRejectsBadRange(t *testing.T) {
	for _, r := range [][2]int{{30000, 20000}, {0, 70000}, {-5, 10}} {
		if _, err := New(Config{MinDynamicPort: r[0], MaxDynamicPort: r[1]}, nil); err == nil {
			t.Errorf("range %v accepted", r)
		}
	}
}

// Port mappings carry the address of the node they are placed on (its
// unique.network.ip-address), so a cluster's allocations show where their
// ports are reachable; a node without it gets the configured default.
func TestPortMappingsCarryTheNodeAddress(t *testing.T) {
	s := newTest(t, 20000, 20005)
	n := node("n1", "raw_exec")
	n.Attributes["unique.network.ip-address"] = "10.1.2.3"
	p, err := s.Process(job("a", 1, withPorts([]int{9002}, "http")), nil, []*structs.Node{n}, Options{})
	if err != nil || len(p.Place) != 1 {
		t.Fatalf("Process: %v, placed %d", err, len(p.Place))
	}
	for _, pm := range p.Place[0].AllocatedResources.Shared.Ports {
		if pm.HostIP != "10.1.2.3" {
			t.Errorf("port %s mapped on %q, want the node's 10.1.2.3", pm.Label, pm.HostIP)
		}
	}
	delete(n.Attributes, "unique.network.ip-address")
	p, err = s.Process(job("b", 1, withPorts(nil, "http")), nil, []*structs.Node{n}, Options{})
	if err != nil || len(p.Place) != 1 || p.Place[0].AllocatedResources.Shared.Ports[0].HostIP != "127.0.0.1" {
		t.Fatalf("without the attribute: %v, %+v", err, p.Place)
	}
}

// An allocation whose replacement could not be placed keeps running, so it
// keeps its ports and its cpu and memory for the rest of the plan (Nomad
// backs the stop out of the plan): another group must not be placed onto
// them.
func TestFailedReplacementKeepsItsResources(t *testing.T) {
	n1 := cnode("n1", "dc1", 1000, 1000)
	s := newTest(t, 20000, 20010)
	prev := existing(t, s, job("a", 1, withPorts([]int{9002}), withRes(600, 600)), n1)
	cur := job("a", 1, withPorts([]int{9002}), withRes(600, 600), func(j *structs.Job) {
		j.Version = 1
		j.TaskGroups[0].Tasks[0].Driver = "docker" // on no node: web cannot be replaced
		api := *j.TaskGroups[0]
		api.Name = "api"
		api.Tasks = []*structs.Task{{Name: "app", Driver: "raw_exec", Resources: j.TaskGroups[0].Tasks[0].Resources}}
		j.TaskGroups = append(j.TaskGroups, &api)
	})
	for _, tc := range []struct {
		name string
		job  *structs.Job
		dim  string
	}{
		{"static port", cur, "port 9002 already in use"},
		{"cpu and memory", func() *structs.Job {
			j := *cur
			api := *cur.TaskGroups[1]
			api.Networks = nil
			j.TaskGroups = []*structs.TaskGroup{cur.TaskGroups[0], &api}
			return &j
		}(), DimensionCPU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.Process(tc.job, prev, []*structs.Node{n1}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Stop) != 0 || len(p.Place) != 0 {
				t.Fatalf("stopped %v, placed %v; want web kept and api not placed", names(p.Stop), names(p.Place))
			}
			var reasons []string
			for _, f := range p.Failures {
				reasons = append(reasons, f.Group+": "+strings.Join(f.Reasons(), "; "))
			}
			if len(p.Failures) != 2 || !strings.Contains(strings.Join(reasons, "|"), tc.dim) {
				t.Fatalf("failures %q, want web's and api's (%s)", reasons, tc.dim)
			}
		})
	}
}
