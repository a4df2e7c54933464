package command

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

func runJobStatus(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 || fs.NArg() == 1 && fs.Arg(0) == "" {
		return e.usageError(c, "expected at most one argument: a JOB ID")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if fs.NArg() == 0 {
		return e.listJobs(client, addr.Addr)
	}
	job, err := resolveJob(client, fs.Arg(0))
	if err != nil {
		return e.errorf("%s", describe(err, addr.Addr))
	}
	return e.showJob(client, addr.Addr, job)
}

func (e *env) listJobs(client *nomadapi.Client, addr string) int {
	jobs, _, err := client.Jobs().List(nil)
	if err != nil {
		return e.errorf("failed to list jobs: %s", describe(err, addr))
	}
	if len(jobs) == 0 {
		fmt.Fprintln(e.stdout, "No running jobs")
		return exitOK
	}
	rows := []string{row("ID", "Type", "Priority", "Status", "Submit Date")}
	for _, j := range jobs {
		rows = append(rows, row(j.ID, j.Type, j.Priority, j.Status, timestamp(j.SubmitTime)))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

// resolveJob finds a job by ID or unique prefix.
func resolveJob(client *nomadapi.Client, id string) (*nomadapi.Job, error) {
	job, _, err := client.Jobs().Info(id, nil)
	if err == nil || !isNotFound(err) {
		return job, err
	}
	stubs, _, lerr := client.Jobs().PrefixList(id)
	if lerr != nil {
		return nil, lerr
	}
	switch len(stubs) {
	case 0:
		return nil, fmt.Errorf("no job with ID or prefix %q", id)
	case 1:
		job, _, err = client.Jobs().Info(stubs[0].ID, nil)
		return job, err
	}
	ids := make([]string, len(stubs))
	for i, s := range stubs {
		ids[i] = s.ID
	}
	return nil, fmt.Errorf("prefix %q matches several jobs: %s", id, strings.Join(ids, ", "))
}

func (e *env) showJob(client *nomadapi.Client, addr string, job *nomadapi.Job) int {
	id := deref(job.ID)
	writeKV(e.stdout, [][2]string{
		{"ID", id},
		{"Name", deref(job.Name)},
		{"Submit Date", timestamp(deref(job.SubmitTime))},
		{"Type", deref(job.Type)},
		{"Priority", fmt.Sprint(deref(job.Priority))},
		{"Datacenters", strings.Join(job.Datacenters, ",")},
		{"Namespace", orNone(deref(job.Namespace))},
		{"Status", deref(job.Status)},
		{"Version", fmt.Sprint(deref(job.Version))},
	})
	summary, _, err := client.Jobs().Summary(id, nil)
	if err != nil {
		return e.errorf("failed to query summary of job %q: %s", id, describe(err, addr))
	}
	fmt.Fprintf(e.stdout, "\nSummary\n")
	rows := []string{row("Task Group", "Queued", "Starting", "Running", "Failed", "Complete", "Lost")}
	for _, g := range slices.Sorted(maps.Keys(summary.Summary)) {
		s := summary.Summary[g]
		rows = append(rows, row(g, s.Queued, s.Starting, s.Running, s.Failed, s.Complete, s.Lost))
	}
	writeTable(e.stdout, rows)

	evals, _, err := client.Jobs().Evaluations(id, nil)
	if err != nil {
		evals = nil // both sections are best effort
	}
	if lines := latestPlacementFailures(evals); len(lines) > 0 {
		// The reasons quote the job (drivers, constraint values): escaped
		// as the monitor's progress lines are.
		fmt.Fprintf(e.stdout, "\nPlacement Failure\n")
		for _, l := range lines {
			fmt.Fprintln(e.stdout, escapeUnprintable(l))
		}
	}

	allocs, _, err := client.Jobs().Allocations(id, true, nil)
	if err != nil {
		return e.errorf("failed to list allocations of job %q: %s", id, describe(err, addr))
	}
	now := time.Now()
	if future := futureReschedules(evals, allocs, now); len(future) > 0 {
		fmt.Fprintf(e.stdout, "\nFuture Rescheduling Attempts\n")
		writeTable(e.stdout, append([]string{row("Task Group", "Eval ID", "Eval Time")}, future...))
	}
	fmt.Fprintf(e.stdout, "\nAllocations\n")
	if len(allocs) == 0 {
		fmt.Fprintln(e.stdout, "No allocations placed")
		return exitOK
	}
	rows = []string{row("ID", "Node ID", "Task Group", "Version", "Desired", "Status", "Created")}
	for _, a := range allocs {
		rows = append(rows, row(short(a.ID), short(a.NodeID), a.TaskGroup, a.JobVersion, a.DesiredStatus, a.ClientStatus, ago(a.CreateTime, now)))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

// latestPlacementFailures renders the placement failures of the newest
// evaluation, if it has any.
func latestPlacementFailures(evals []*nomadapi.Evaluation) []string {
	var latest *nomadapi.Evaluation
	for _, ev := range evals {
		if latest == nil || ev.CreateIndex > latest.CreateIndex {
			latest = ev
		}
	}
	if latest == nil || len(latest.FailedTGAllocs) == 0 {
		return nil
	}
	return placementFailures(latest)
}
