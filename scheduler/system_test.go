package scheduler

import (
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

func systemJob(typ string, mutate ...func(*structs.Job)) *structs.Job {
	return job("agent", 1, append([]func(*structs.Job){func(j *structs.Job) { j.Type = typ }}, mutate...)...)
}

// settle gives a plan's placements create indexes, as the server does when
// it writes them, and returns them as the allocations the next run sees.
func settle(p *Plan, from int) []*structs.Allocation {
	for i, a := range p.Place {
		a.CreateIndex = uint64(from + i)
	}
	return p.Place
}

func nodesOf(allocs []*structs.Allocation) map[string]int {
	out := map[string]int{}
	for _, a := range allocs {
		out[a.NodeName]++
	}
	return out
}

func wantNodes(t *testing.T, what string, got map[string]int, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s on %v, want exactly %v", what, got, want)
	}
	for _, n := range want {
		if got[n] != 1 {
			t.Fatalf("%s on %v, want one on each of %v", what, got, want)
		}
	}
}

// A system job runs one allocation of its group on every node that can run
// it, whatever its count: not on a node without the driver, an ineligible
// one or one in another datacenter; a node that joins later gets one, and
// the allocations of a node that goes down or is deregistered are lost.
func TestSystemPlacesOnEveryNode(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n1, n2 := node("n1", "raw_exec"), node("n2", "raw_exec")
	noDriver := node("n3", "exec")
	inelig := node("n4", "raw_exec")
	inelig.SchedulingEligibility = structs.NodeSchedulingIneligible
	otherDC := node("n5", "raw_exec")
	otherDC.Datacenter = "dc2"
	j := systemJob(structs.JobTypeSystem)
	p, err := s.Process(j, nil, []*structs.Node{n1, n2, noDriver, inelig, otherDC}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantNodes(t, "placements", nodesOf(p.Place), "n1", "n2")
	if len(p.Failures) != 0 || len(p.Stop) != 0 {
		t.Fatalf("filtered nodes are not failures and nothing stops: %+v %+v", p.Failures, p.Stop)
	}
	if p.Place[0].Name != "agent.web[0]" {
		t.Errorf("name %q, want agent.web[0] (Nomad's system allocation name)", p.Place[0].Name)
	}
	allocs := settle(p, 1)

	// Nothing to do again; a new node gets one; the ineligible node keeps
	// nothing; a node gone down has its allocation lost.
	if p, _ := s.Process(j, allocs, []*structs.Node{n1, n2}, Options{}); len(p.Place)+len(p.Stop)+len(p.Update) != 0 {
		t.Fatalf("a settled system job changes: %+v", p)
	}
	n6 := node("n6", "raw_exec")
	p, _ = s.Process(j, allocs, []*structs.Node{n1, n2, n6}, Options{})
	wantNodes(t, "a joining node's placement", nodesOf(p.Place), "n6")
	allocs = append(allocs, settle(p, 10)...)
	down := *n2
	down.Status = structs.NodeStatusDown
	p, _ = s.Process(j, allocs, []*structs.Node{n1, &down}, Options{})
	if len(p.Place) != 0 || len(p.Stop) != 2 {
		t.Fatalf("n2 down, n6 deregistered: want 2 stops and no placement, got %+v", p)
	}
	for _, a := range p.Stop {
		if a.ClientStatus != structs.AllocClientStatusLost || (a.NodeName != "n2" && a.NodeName != "n6") {
			t.Errorf("stopped %s on %s as %s, want lost on n2 or n6", a.Name, a.NodeName, a.ClientStatus)
		}
	}
}

// A job update replaces every system allocation on its own node; a count
// or version-only change updates them in place; a node without room is a
// placement failure; a node where the new version cannot run stops its
// allocation.
func TestSystemUpdates(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n1, n2 := node("n1", "raw_exec"), node("n2", "raw_exec", "exec")
	j := systemJob(structs.JobTypeSystem)
	p, _ := s.Process(j, nil, []*structs.Node{n1, n2}, Options{})
	allocs := settle(p, 1)

	meta := systemJob(structs.JobTypeSystem, func(j *structs.Job) { j.Version, j.JobModifyIndex = 1, 5 })
	p, _ = s.Process(meta, allocs, []*structs.Node{n1, n2}, Options{})
	if len(p.Update) != 2 || len(p.Place)+len(p.Stop) != 0 {
		t.Fatalf("version-only change: want 2 in-place updates, got %+v", p)
	}

	exec := systemJob(structs.JobTypeSystem, func(j *structs.Job) {
		j.Version = 2
		j.TaskGroups[0].Tasks[0].Driver = "exec"
	})
	p, _ = s.Process(exec, allocs, []*structs.Node{n1, n2}, Options{})
	wantNodes(t, "replacements", nodesOf(p.Place), "n2")
	stops := map[string]string{}
	for _, a := range p.Stop {
		stops[a.NodeName] = a.DesiredDescription
		if a.NodeName == "n2" && a.NextAllocation != p.Place[0].ID {
			t.Errorf("n2's old allocation points to %q, want its replacement %s", a.NextAllocation, p.Place[0].ID)
		}
	}
	if stops["n1"] != DescNodeTainted || stops["n2"] != DescJobUpdated {
		t.Fatalf("stops %v: want n1 %q (no exec driver), n2 %q", stops, DescNodeTainted, DescJobUpdated)
	}

	big := systemJob(structs.JobTypeSystem, func(j *structs.Job) {
		huge := 1 << 30
		j.TaskGroups[0].Tasks[0].Resources = &structs.Resources{MemoryMB: &huge}
	})
	small := []*structs.Node{cnode("s1", "dc1", 1000, 1024), cnode("s2", "dc1", 1000, 1024)}
	p, _ = s.Process(big, nil, small, Options{})
	if len(p.Place) != 0 || len(p.Failures) != 1 || p.Failures[0].Count != 2 || p.Failures[0].Exhausted["memory"] != 2 {
		t.Fatalf("no room anywhere: want one failure of 2 with memory exhausted, got %+v %+v", p.Place, p.Failures)
	}
}

// Terminal system allocations: a failed one stays until the job is
// submitted again; a sysbatch allocation that completed is not run again
// on its node, but a new node runs it and a group change runs it again.
func TestSystemTerminalAllocs(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n1, n2 := node("n1", "raw_exec"), node("n2", "raw_exec")
	j := systemJob(structs.JobTypeSystem)
	p, _ := s.Process(j, nil, []*structs.Node{n1}, Options{})
	allocs := settle(p, 1)
	allocs[0].ClientStatus = structs.AllocClientStatusFailed
	if p, _ := s.Process(j, allocs, []*structs.Node{n1}, Options{}); len(p.Place) != 0 {
		t.Fatalf("a failed system allocation was replaced without a new submission: %+v", p.Place)
	}
	p, _ = s.Process(j, allocs, []*structs.Node{n1}, Options{ForceReschedule: true, Now: time.Now()})
	if len(p.Place) != 1 || p.Place[0].PreviousAllocation != allocs[0].ID {
		t.Fatalf("job run again: want the failed allocation replaced, got %+v", p.Place)
	}

	sb := systemJob(structs.JobTypeSysBatch)
	p, _ = s.Process(sb, nil, []*structs.Node{n1}, Options{})
	allocs = settle(p, 1)
	allocs[0].ClientStatus = structs.AllocClientStatusComplete
	p, _ = s.Process(sb, allocs, []*structs.Node{n1, n2}, Options{ForceReschedule: true})
	wantNodes(t, "sysbatch placements after completion on n1", nodesOf(p.Place), "n2")
	changed := systemJob(structs.JobTypeSysBatch, func(j *structs.Job) {
		j.Version = 1
		j.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/echo"}
	})
	p, _ = s.Process(changed, allocs, []*structs.Node{n1}, Options{})
	wantNodes(t, "sysbatch after a group change", nodesOf(p.Place), "n1")
}

// Draining nodes keep their system allocations until the drain's deadline.
func TestSystemDrain(t *testing.T) {
	s := newTest(t, 20000, 20010)
	n1 := node("n1", "raw_exec")
	j := systemJob(structs.JobTypeSystem)
	p, _ := s.Process(j, nil, []*structs.Node{n1}, Options{})
	allocs := settle(p, 1)
	now := time.Now()
	draining := *n1
	draining.Drain, draining.DrainStrategy = true, deadlineIn(now, time.Hour)
	if p, _ := s.Process(j, allocs, []*structs.Node{&draining}, Options{Now: now}); len(p.Stop)+len(p.Place) != 0 {
		t.Fatalf("before the deadline: %+v", p)
	}
	p, _ = s.Process(j, allocs, []*structs.Node{&draining}, Options{Now: now.Add(2 * time.Hour)})
	if len(p.Stop) != 1 || p.Stop[0].DesiredDescription != DescAllocMigrating || len(p.Place) != 0 {
		t.Fatalf("at the deadline: want the allocation stopped as migrating and nothing placed, got %+v", p)
	}
}
