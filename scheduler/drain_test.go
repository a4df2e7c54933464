package scheduler

import (
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// drainPlan places job on n1, drains n1 with d (nil: no drain strategy,
// only Drain) and plans the job again against n1 and others, at now.
func drainPlan(t *testing.T, j *structs.Job, d *structs.DrainStrategy, now time.Time, others ...*structs.Node) (*Plan, []*structs.Allocation) {
	t.Helper()
	s := newTest(t, 20000, 20100)
	n1 := node("n1", "raw_exec")
	prev := existing(t, s, j, n1)
	for _, a := range prev {
		a.ClientStatus = structs.AllocClientStatusRunning
	}
	drained := *n1
	drained.Drain, drained.DrainStrategy = true, d
	drained.SchedulingEligibility = structs.NodeSchedulingIneligible
	p, err := s.Process(j, prev, append([]*structs.Node{&drained}, others...), Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return p, prev
}

func deadlineIn(now time.Time, d time.Duration) *structs.DrainStrategy {
	return &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: d}, StartedAt: now, ForceDeadline: now.Add(d)}
}

// checkMigrated: every allocation of prev is stopped as migrating, keeps
// its client status, and (when replaced) names a replacement on node n2.
func checkMigrated(t *testing.T, p *Plan, prev []*structs.Allocation, replaced bool) {
	t.Helper()
	if len(p.Stop) != len(prev) {
		t.Fatalf("plan stops %d allocations, want %d: %+v", len(p.Stop), len(prev), p.Stop)
	}
	placed := map[string]*structs.Allocation{}
	for _, a := range p.Place {
		placed[a.ID] = a
	}
	for _, st := range p.Stop {
		if st.DesiredStatus != structs.AllocDesiredStatusStop || st.DesiredDescription != DescAllocMigrating {
			t.Errorf("stop %s: desired %q (%q), want stop (%q)", st.Name, st.DesiredStatus, st.DesiredDescription, DescAllocMigrating)
		}
		if st.ClientStatus != structs.AllocClientStatusRunning {
			t.Errorf("stop %s: client status %q, want running (migrated, not lost)", st.Name, st.ClientStatus)
		}
		next := placed[st.NextAllocation]
		switch {
		case !replaced && st.NextAllocation != "":
			t.Errorf("stop %s names replacement %s, want none", st.Name, st.NextAllocation)
		case replaced && next == nil:
			t.Errorf("stop %s names no placed replacement (%q)", st.Name, st.NextAllocation)
		case replaced && (next.NodeID != "id-n2" || next.PreviousAllocation != st.ID || next.Name != st.Name):
			t.Errorf("replacement of %s: node %s, previous %s, name %s", st.Name, next.NodeID, next.PreviousAllocation, next.Name)
		}
	}
}

func TestDrainingNodeMigratesServiceAllocs(t *testing.T) {
	now := time.Now()
	p, prev := drainPlan(t, job("web", 2), deadlineIn(now, time.Hour), now, node("n2", "raw_exec"))
	if len(p.Place) != 2 || len(p.Failures) != 0 {
		t.Fatalf("plan places %d (failures %+v), want the 2 replacements", len(p.Place), p.Failures)
	}
	checkMigrated(t, p, prev, true)
}

// TestDrainWithoutRoomKeepsAllocsUntilDeadline: with nowhere to go, a
// service allocation keeps running on the draining node until the drain's
// deadline; then (or at once for a forced drain) it is stopped anyway.
func TestDrainWithoutRoomKeepsAllocsUntilDeadline(t *testing.T) {
	now := time.Now()
	ineligible := node("n2", "raw_exec")
	ineligible.SchedulingEligibility = structs.NodeSchedulingIneligible
	p, _ := drainPlan(t, job("web", 2), deadlineIn(now, time.Hour), now, ineligible)
	if len(p.Stop) != 0 || len(p.Place) != 0 {
		t.Fatalf("before the deadline: stops %d, places %d, want none", len(p.Stop), len(p.Place))
	}
	if len(p.Failures) != 1 || p.Failures[0].Count != 2 || p.Failures[0].Filtered[ReasonNodeDraining] != 1 {
		t.Fatalf("failures %+v, want 2 unplaced with the draining node filtered", p.Failures)
	}
	for name, d := range map[string]*structs.DrainStrategy{
		"deadline passed": deadlineIn(now.Add(-2*time.Hour), time.Hour),
		"forced":          {DrainSpec: structs.DrainSpec{Deadline: -1}, StartedAt: now},
		"no strategy":     nil,
	} {
		p, prev := drainPlan(t, job("web", 2), d, now, ineligible)
		t.Run(name, func(t *testing.T) { checkMigrated(t, p, prev, false) })
	}
	// No deadline: never forced.
	p, _ = drainPlan(t, job("web", 2), &structs.DrainStrategy{StartedAt: now.Add(-1000 * time.Hour)}, now)
	if len(p.Stop) != 0 {
		t.Fatalf("drain without deadline stopped %d allocations with nowhere to go", len(p.Stop))
	}
}

// TestDrainLetsBatchAllocsFinishUntilDeadline: batch allocations are left
// to finish until the drain's deadline (Nomad), then migrated.
func TestDrainLetsBatchAllocsFinishUntilDeadline(t *testing.T) {
	now := time.Now()
	batch := job("report", 1, func(j *structs.Job) { j.Type = structs.JobTypeBatch })
	p, _ := drainPlan(t, batch, deadlineIn(now, time.Hour), now, node("n2", "raw_exec"))
	if len(p.Stop) != 0 || len(p.Place) != 0 {
		t.Fatalf("before the deadline: stops %d, places %d, want none", len(p.Stop), len(p.Place))
	}
	p, prev := drainPlan(t, batch, deadlineIn(now, time.Hour), now.Add(time.Hour), node("n2", "raw_exec"))
	checkMigrated(t, p, prev, true)
}

// TestIneligibleOrDownDrainingNode: ineligibility alone keeps allocations
// where they are; a draining node that is down loses them (lost wins).
func TestIneligibleOrDownDrainingNode(t *testing.T) {
	s := newTest(t, 20000, 20100)
	n1, n2 := node("n1", "raw_exec"), node("n2", "raw_exec")
	j := job("web", 2)
	prev := existing(t, s, j, n1)
	ineligible := *n1
	ineligible.SchedulingEligibility = structs.NodeSchedulingIneligible
	p, err := s.Process(j, prev, []*structs.Node{&ineligible, n2}, Options{})
	if err != nil || len(p.Stop)+len(p.Place) != 0 {
		t.Fatalf("ineligible node: %v, stops %d, places %d, want none", err, len(p.Stop), len(p.Place))
	}
	down := ineligible
	down.Status, down.Drain = structs.NodeStatusDown, true
	down.DrainStrategy = deadlineIn(time.Now(), time.Hour)
	p, err = s.Process(j, prev, []*structs.Node{&down, n2}, Options{})
	if err != nil || len(p.Stop) != 2 {
		t.Fatalf("down draining node: %v, stops %d, want 2", err, len(p.Stop))
	}
	for _, st := range p.Stop {
		if st.DesiredDescription != DescAllocLost || st.ClientStatus != structs.AllocClientStatusLost {
			t.Errorf("stop %s: %q/%q, want lost", st.Name, st.DesiredDescription, st.ClientStatus)
		}
	}
}
