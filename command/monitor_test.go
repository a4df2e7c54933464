package command

import (
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func ev(status string, failed map[string]*nomadapi.AllocationMetric) *nomadapi.Evaluation {
	return &nomadapi.Evaluation{ID: "eeeeeeee-1111", JobID: "web", Status: status, FailedTGAllocs: failed}
}

// stub builds an allocation of group "web" whose tasks are all in state.
func stub(id, desired, client string, tasks map[string]string, events ...*nomadapi.TaskEvent) *nomadapi.AllocationListStub {
	ts := map[string]*nomadapi.TaskState{}
	for name, state := range tasks {
		ts[name] = &nomadapi.TaskState{State: state, Failed: client == "failed", Events: events}
	}
	return &nomadapi.AllocationListStub{ID: id, NodeName: "dev-1", TaskGroup: "web", DesiredStatus: desired, ClientStatus: client, TaskStates: ts}
}

type step struct {
	eval   *nomadapi.Evaluation
	allocs []*nomadapi.AllocationListStub
	want   outcome
	lines  []string // substrings that must appear in this step's lines
	none   bool     // no lines at all
}

// TestMonitor scripts snapshot sequences through the state machine.
func TestMonitor(t *testing.T) {
	app := map[string]string{"app": "running"}
	pending := map[string]string{"app": "pending"}
	tests := []struct {
		name    string
		jobType string
		counts  map[string]int
		steps   []step
	}{
		{"placed then running", "service", map[string]int{"web": 2}, []step{
			{ev("pending", nil), nil, inProgress, []string{`Evaluation triggered by job "web"`}, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "pending", pending)}, inProgress,
				[]string{`Evaluation status changed: "pending" -> "complete"`, `Allocation "aaaaaaaa" created: node "dev-1", group "web"`}, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app), stub("bbbbbbbb-2", "run", "pending", pending)}, inProgress,
				[]string{`Allocation "aaaaaaaa" status changed: "pending" -> "running"`, `Allocation "aaaaaaaa" task "app" is "running"`, `Allocation "bbbbbbbb" created`}, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app), stub("bbbbbbbb-2", "run", "pending", pending)}, inProgress,
				nil, true},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app), stub("bbbbbbbb-2", "run", "running", app)}, succeeded,
				[]string{`All allocations are running`}, false},
		}},
		{"restarting task is not settled", "service", map[string]int{"web": 1}, []step{
			{nil, []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", pending,
				&nomadapi.TaskEvent{Type: "Restarting", DisplayMessage: "Task restarting in 15s"})}, inProgress,
				[]string{`task "app": Restarting: Task restarting in 15s`}, false},
			{nil, []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app)}, succeeded, []string{`task "app" is "running"`}, false},
		}},
		{"stale stopped allocation ignored", "service", map[string]int{"web": 1}, []step{
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("oooooooo-0", "stop", "running", app)}, inProgress, nil, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("oooooooo-0", "stop", "complete", map[string]string{"app": "dead"}),
				stub("nnnnnnnn-1", "run", "running", app)}, succeeded, []string{`Allocation "nnnnnnnn" created`}, false},
		}},
		{"placement failure", "service", map[string]int{"web": 1}, []step{
			{ev("complete", map[string]*nomadapi.AllocationMetric{"web": {NodesEvaluated: 1, NodesFiltered: 1,
				ConstraintFiltered: map[string]int{"driver docker not available on node dev-1": 1}}}), nil, failed,
				[]string{`failed to place all allocations`, `Task Group "web" (failed to place 1 allocation):`, `  * driver docker not available on node dev-1`}, false},
		}},
		{"failed evaluation", "service", map[string]int{"web": 1}, []step{
			{&nomadapi.Evaluation{ID: "eeeeeeee-1", Status: "failed", StatusDescription: "maximum attempts reached"}, nil, failed,
				[]string{`finished with status "failed": maximum attempts reached`}, false},
		}},
		{"blocked evaluation", "service", map[string]int{"web": 1}, []step{
			{&nomadapi.Evaluation{ID: "eeeeeeee-1", Status: "blocked", StatusDescription: "created to place remaining allocations"}, nil, failed,
				[]string{`finished with status "blocked": created to place remaining allocations`}, false},
		}},
		{"allocation fails", "service", map[string]int{"web": 1}, []step{
			{nil, []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "pending", pending)}, inProgress, nil, false},
			{nil, []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "failed", map[string]string{"app": "dead"},
				&nomadapi.TaskEvent{Type: "Driver Failure", DriverError: "exec: not found"})}, failed,
				[]string{`task "app": Driver Failure: exec: not found`, `Allocation "aaaaaaaa" failed: task "app": Driver Failure: exec: not found`}, false},
		}},
		{"batch completes", "batch", map[string]int{"web": 1}, []step{
			{nil, []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "complete", map[string]string{"app": "dead"},
				&nomadapi.TaskEvent{Type: "Terminated", ExitCode: 0})}, succeeded,
				[]string{`task "app": Terminated: Exit Code: 0`, `All allocations are running or complete`}, false},
		}},
		{"sysbatch completes", "sysbatch", map[string]int{"web": 1}, []step{
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "complete", map[string]string{"app": "dead"}),
				stub("bbbbbbbb-2", "run", "pending", pending)}, inProgress, nil, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "complete", map[string]string{"app": "dead"}),
				stub("bbbbbbbb-2", "run", "complete", map[string]string{"app": "dead"})}, succeeded,
				[]string{`All allocations are running or complete`}, false},
		}},
		{"system on every node", "system", map[string]int{"web": 1}, []step{
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app), stub("bbbbbbbb-2", "run", "pending", pending)}, inProgress, nil, false},
			{ev("complete", nil), []*nomadapi.AllocationListStub{stub("aaaaaaaa-1", "run", "running", app), stub("bbbbbbbb-2", "run", "running", app)}, succeeded,
				[]string{`All allocations are running`}, false},
		}},
		{"system without an eligible node", "system", map[string]int{"web": 1}, []step{
			{nil, nil, inProgress, nil, false},
			{ev("pending", nil), nil, inProgress, nil, false},
			{ev("complete", nil), nil, succeeded, []string{`No allocation placed: no node is eligible to run the job`}, false},
		}},
		{"sysbatch without an eligible node", "sysbatch", map[string]int{"web": 1}, []step{
			{ev("complete", nil), nil, succeeded, []string{`No allocation placed`}, false},
		}},
		{"zero count", "service", map[string]int{"web": 0}, []step{
			{ev("complete", nil), nil, succeeded, nil, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMonitor("eeeeeeee-1111", tc.jobType, tc.counts)
			for i, st := range tc.steps {
				lines, out := m.observe(st.eval, st.allocs)
				joined := strings.Join(lines, "\n")
				if out != st.want {
					t.Fatalf("step %d: outcome %d, want %d; lines:\n%s", i, out, st.want, joined)
				}
				if st.none && len(lines) != 0 {
					t.Fatalf("step %d: want no lines, got:\n%s", i, joined)
				}
				for _, want := range st.lines {
					if !strings.Contains(joined, want) {
						t.Fatalf("step %d: lines lack %q:\n%s", i, want, joined)
					}
				}
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"", 3, ""},
		{"a\n", 0, ""},
	}
	for _, tc := range tests {
		if got := string(lastLines([]byte(tc.in), tc.n)); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestSkipWriter(t *testing.T) {
	var out strings.Builder
	w := &skipWriter{skip: 6, lines: 1, out: &out}
	for _, chunk := range []string{"a\nb", "\nc\nd", "\ne\n"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if got := out.String(); got != "c\nd\ne\n" {
		t.Fatalf("skipWriter wrote %q, want %q", got, "c\nd\ne\n")
	}
}
