package command

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
)

// outcome is where a monitored registration stands.
type outcome int

const (
	inProgress outcome = iota
	succeeded
	failed
)

// allocView is what the monitor last saw of one allocation.
type allocView struct {
	clientStatus string
	tasks        map[string]string // task -> state
	events       map[string]int    // task -> events already seen
}

// monitor is the pure state machine behind `job run`: it folds snapshots
// (the evaluation, the job's allocations) into progress lines and decides
// when the registration succeeded (every wanted allocation running; for
// batch and sysbatch jobs running or complete; for system and sysbatch
// jobs, whatever the complete evaluation placed, perhaps nothing) or failed (placement failure, failed
// evaluation, a failed or lost allocation). It does no I/O.
type monitor struct {
	evalID     string
	jobType    string
	counts     map[string]int // group -> count
	evalStatus string
	reported   bool // placement failures printed
	allocs     map[string]*allocView
}

func newMonitor(evalID, jobType string, counts map[string]int) *monitor {
	return &monitor{evalID: evalID, jobType: jobType, counts: counts, allocs: make(map[string]*allocView)}
}

// observe folds one snapshot in and returns the new progress lines and the
// outcome so far. eval may be nil (agent without evaluations).
func (m *monitor) observe(eval *nomadapi.Evaluation, allocs []*nomadapi.AllocationListStub) ([]string, outcome) {
	var lines []string
	if eval != nil && eval.Status != m.evalStatus {
		if m.evalStatus == "" {
			lines = append(lines, fmt.Sprintf("Evaluation triggered by job %q", eval.JobID))
		} else {
			lines = append(lines, fmt.Sprintf("Evaluation status changed: %q -> %q", m.evalStatus, eval.Status))
		}
		m.evalStatus = eval.Status
	}
	lines = append(lines, m.trackAllocs(allocs)...)
	if eval != nil {
		if l, out := m.evalOutcome(eval); out != inProgress {
			return append(lines, l...), out
		}
	}
	l, out := m.allocOutcome(eval, allocs)
	return append(lines, l...), out
}

// evalOutcome fails on placement failures and failed evaluations.
func (m *monitor) evalOutcome(eval *nomadapi.Evaluation) ([]string, outcome) {
	if len(eval.FailedTGAllocs) > 0 {
		if m.reported {
			return nil, failed
		}
		m.reported = true
		lines := []string{fmt.Sprintf("Evaluation %q finished with status %q but failed to place all allocations:",
			short(eval.ID), eval.Status)}
		return append(lines, placementFailures(eval)...), failed
	}
	switch eval.Status {
	case "failed", "canceled", "blocked":
		return []string{fmt.Sprintf("Evaluation %q finished with status %q: %s",
			short(eval.ID), eval.Status, orNone(eval.StatusDescription))}, failed
	}
	return nil, inProgress
}

// allocOutcome judges the allocations that should run.
func (m *monitor) allocOutcome(eval *nomadapi.Evaluation, allocs []*nomadapi.AllocationListStub) ([]string, outcome) {
	live := make(map[string]int)
	settled := true
	for _, a := range allocs {
		if a.DesiredStatus != "run" {
			continue
		}
		switch a.ClientStatus {
		case "failed", "lost":
			return []string{fmt.Sprintf("Allocation %q %s: %s", short(a.ID), a.ClientStatus, failureReason(a))}, failed
		}
		live[a.TaskGroup]++
		if !m.allocSettled(a) {
			settled = false
		}
	}
	if eval != nil && eval.Status != "complete" {
		return nil, inProgress
	}
	if !m.perNode() {
		for g, n := range m.counts {
			if live[g] < n {
				return nil, inProgress
			}
		}
	} else if len(live) == 0 {
		// A system job has no count: once its evaluation is complete, what
		// it placed is all there is, possibly nothing (no eligible node).
		// Without the evaluation there is no telling, so wait for one.
		if eval == nil {
			return nil, inProgress
		}
		return []string{"No allocation placed: no node is eligible to run the job"}, succeeded
	}
	if !settled {
		return nil, inProgress
	}
	if m.runsToCompletion() {
		return []string{"All allocations are running or complete"}, succeeded
	}
	return []string{"All allocations are running"}, succeeded
}

// perNode reports a system or sysbatch job: one allocation per eligible
// node, however many that is, rather than count per group.
func (m *monitor) perNode() bool { return m.jobType == "system" || m.jobType == "sysbatch" }

// runsToCompletion reports a batch or sysbatch job, whose allocations are
// done once complete.
func (m *monitor) runsToCompletion() bool { return m.jobType == "batch" || m.jobType == "sysbatch" }

// allocSettled: running with every task running (or finished without
// failing, like a completed prestart task); batch and sysbatch also accept
// complete.
func (m *monitor) allocSettled(a *nomadapi.AllocationListStub) bool {
	switch {
	case a.ClientStatus == "complete" && m.runsToCompletion():
		return true
	case a.ClientStatus != "running":
		return false
	}
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		if ts.State != "running" && (ts.State != "dead" || ts.Failed) {
			return false
		}
	}
	return true
}

// trackAllocs reports new allocations, status and task-state changes, and
// notable task events, in a stable order.
func (m *monitor) trackAllocs(allocs []*nomadapi.AllocationListStub) []string {
	var lines []string
	for _, a := range allocs {
		v, seen := m.allocs[a.ID]
		if !seen {
			if a.DesiredStatus != "run" {
				// Already stopping when first seen: report only later changes.
				m.allocs[a.ID] = quietView(a)
				continue
			}
			node := a.NodeName
			if node == "" {
				node = short(a.NodeID)
			}
			lines = append(lines, fmt.Sprintf("Allocation %q created: node %q, group %q", short(a.ID), node, a.TaskGroup))
			v = &allocView{tasks: map[string]string{}, events: map[string]int{}}
			m.allocs[a.ID] = v
		}
		if v.clientStatus != a.ClientStatus {
			if v.clientStatus != "" || a.ClientStatus != "pending" {
				lines = append(lines, fmt.Sprintf("Allocation %q status changed: %q -> %q%s",
					short(a.ID), orNone(v.clientStatus), a.ClientStatus, describeSuffix(a.ClientDescription)))
			}
			v.clientStatus = a.ClientStatus
		}
		lines = append(lines, m.trackTasks(a, v)...)
	}
	return lines
}

// quietView records an allocation's current state without reporting it.
func quietView(a *nomadapi.AllocationListStub) *allocView {
	v := &allocView{clientStatus: a.ClientStatus, tasks: map[string]string{}, events: map[string]int{}}
	for name, ts := range a.TaskStates {
		if ts != nil {
			v.tasks[name], v.events[name] = ts.State, len(ts.Events)
		}
	}
	return v
}

func (m *monitor) trackTasks(a *nomadapi.AllocationListStub, v *allocView) []string {
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(a.TaskStates)) {
		ts := a.TaskStates[name]
		if ts == nil {
			continue
		}
		for _, ev := range ts.Events[min(v.events[name], len(ts.Events)):] {
			if notableEvent(ev) {
				lines = append(lines, fmt.Sprintf("Allocation %q task %q: %s: %s", short(a.ID), name, ev.Type, eventDescription(ev)))
			}
		}
		v.events[name] = len(ts.Events)
		if prev, ok := v.tasks[name]; prev != ts.State && (ok || ts.State != "pending") {
			lines = append(lines, fmt.Sprintf("Allocation %q task %q is %q", short(a.ID), name, ts.State))
		}
		v.tasks[name] = ts.State
	}
	return lines
}

// notableEvent selects the events worth a progress line (failures,
// restarts, exits).
func notableEvent(ev *nomadapi.TaskEvent) bool {
	if ev == nil {
		return false
	}
	switch ev.Type {
	case "Setup Failure", "Driver Failure", "Terminated", "Restarting", "Not Restarting",
		"Sibling Task Failed", "Failed Validation", "Killed":
		return true
	}
	return ev.FailsTask
}

// failureReason picks the most telling explanation of a failed allocation.
func failureReason(a *nomadapi.AllocationListStub) string {
	for _, name := range slices.Sorted(maps.Keys(a.TaskStates)) {
		ts := a.TaskStates[name]
		if ts == nil || !ts.Failed {
			continue
		}
		for i := len(ts.Events) - 1; i >= 0; i-- {
			ev := ts.Events[i]
			if ev.FailsTask || ev.Type == "Driver Failure" || ev.Type == "Setup Failure" || ev.Type == "Not Restarting" || ev.Type == "Terminated" {
				return fmt.Sprintf("task %q: %s: %s", name, ev.Type, eventDescription(ev))
			}
		}
	}
	return orNone(a.ClientDescription)
}

// placementFailures renders FailedTGAllocs, one "Task Group" header per
// group and one "  * reason" line per cause.
func placementFailures(eval *nomadapi.Evaluation) []string {
	var lines []string
	for _, g := range slices.Sorted(maps.Keys(eval.FailedTGAllocs)) {
		metric := eval.FailedTGAllocs[g]
		n := 1
		if metric != nil {
			n += metric.CoalescedFailures
		}
		plural := ""
		if n > 1 {
			plural = "s"
		}
		lines = append(lines, fmt.Sprintf("Task Group %q (failed to place %d allocation%s):", g, n, plural))
		lines = append(lines, metricReasons(metric)...)
	}
	return lines
}

func metricReasons(m *nomadapi.AllocationMetric) []string {
	if m == nil {
		return []string{"  * no reason recorded"}
	}
	// Exhaustion in Nomad's wording; filter reasons name the node when one
	// node excluded (the scheduler's reasons are sentences).
	var reasons []string
	for _, set := range []map[string]int{m.ConstraintFiltered, m.ClassFiltered} {
		for k, n := range set {
			if n > 1 {
				reasons = append(reasons, fmt.Sprintf("  * %s (%d nodes excluded by filter)", k, n))
			} else {
				reasons = append(reasons, "  * "+k)
			}
		}
	}
	for k, n := range m.ClassExhausted {
		reasons = append(reasons, fmt.Sprintf("  * Class %q exhausted on %d %s", k, n, nodes(n)))
	}
	for k, n := range m.DimensionExhausted {
		reasons = append(reasons, fmt.Sprintf("  * Dimension %q exhausted on %d %s", k, n, nodes(n)))
	}
	sort.Strings(reasons)
	if m.NodesExhausted > 0 {
		reasons = append([]string{fmt.Sprintf("  * Resources exhausted on %d %s", m.NodesExhausted, nodes(m.NodesExhausted))}, reasons...)
	}
	if len(reasons) == 0 {
		if m.NodesEvaluated == 0 {
			return []string{"  * No nodes were eligible for evaluation"}
		}
		return []string{fmt.Sprintf("  * %d of %d nodes were filtered or exhausted", m.NodesFiltered+m.NodesExhausted, m.NodesEvaluated)}
	}
	return reasons
}

func nodes(n int) string {
	if n == 1 {
		return "node"
	}
	return "nodes"
}

func describeSuffix(desc string) string {
	if desc == "" {
		return ""
	}
	return " (" + desc + ")"
}

// eventDescription renders a task event like Nomad's CLI.
func eventDescription(ev *nomadapi.TaskEvent) string {
	if ev.DisplayMessage != "" {
		return ev.DisplayMessage
	}
	for _, s := range []string{ev.DriverError, ev.SetupError, ev.KillError, ev.Message, ev.RestartReason} {
		if s != "" {
			return s
		}
	}
	if ev.Type == "Terminated" {
		parts := []string{fmt.Sprintf("Exit Code: %d", ev.ExitCode)}
		if ev.Signal != 0 {
			parts = append(parts, fmt.Sprintf("Signal: %d", ev.Signal))
		}
		return strings.Join(parts, ", ")
	}
	return ""
}
