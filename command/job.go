package command

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

func init() {
	register(
		&command{
			name: "job run", args: "[options] FILE", synopsis: "Register a jobspec and monitor its allocations",
			help: `Parses FILE locally (diagnostics as file:line:col), registers the job with the
agent and, unless -detach, follows the evaluation and the job's allocations
with blocking queries until every allocation runs (batch jobs: runs or has
completed).

Exit codes: 0 all allocations running; 1 the jobspec or the request failed;
2 the deployment failed (placement failure, failed or lost allocation),
as Nomad does; 130 interrupted (the job stays registered).`,
			example: "$ meshlet job run countdash.hcl\n$ meshlet job run -detach -var image=v2 web.hcl",
			run:     runJobRun,
		},
		&command{
			name: "job validate", args: "FILE", synopsis: "Check a jobspec without an agent",
			help: `Parses and validates FILE locally and prints every diagnostic, warnings and
errors, as file:line:col lines. Prints "Job validation successful" and exits
0 when there is no error; exits 1 otherwise. Needs no agent.`,
			example: "$ meshlet job validate countdash.hcl",
			run:     runJobValidate,
		},
		&command{
			name: "job status", args: "[options] [JOB]", synopsis: "List jobs, or show one job with its allocations",
			help: `Without JOB, lists the registered jobs. With JOB (an ID or a unique prefix),
shows the job, its per-group summary, placement failures and allocations.`,
			example: "$ meshlet job status\n$ meshlet job status countdash",
			run:     runJobStatus,
		},
		&command{
			name: "job stop", args: "[options] JOB", synopsis: "Stop a job's allocations",
			help: `Stops the job (JOB is an ID or a unique prefix) and, unless -detach, waits until
its allocations have stopped. With -purge the job is also removed from the agent.`,
			example: "$ meshlet job stop countdash\n$ meshlet job stop -purge -detach countdash",
			run:     runJobStop,
		},
	)
}

func runJobValidate(e *env, c *command, args []string) int {
	fs := newFlags(c)
	vars := addJobVarFlags(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return e.usageError(c, "expected exactly one argument: the jobspec FILE")
	}
	opts, err := vars.options(e.stdin)
	if err != nil {
		return e.errorf("%v", err)
	}
	if res := parseJobFile(fs.Arg(0), opts, e.stderr); res.errors > 0 {
		return e.errorf("job validation failed: %d error(s)", res.errors)
	}
	fmt.Fprintln(e.stdout, "Job validation successful")
	return exitOK
}

func runJobRun(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	detach := fs.Bool("detach", false, "return after registering, without monitoring")
	ro := registerFlags(fs)
	vars := addJobVarFlags(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return e.usageError(c, "expected exactly one argument: the jobspec FILE")
	}
	opts, err := vars.options(e.stdin)
	if err != nil {
		return e.errorf("%v", err)
	}
	parsed := parseJobFile(fs.Arg(0), opts, e.stderr)
	if parsed.errors > 0 {
		return e.errorf("jobspec %s has %d error(s); nothing was registered", fs.Arg(0), parsed.errors)
	}
	job := parsed.job
	apiJob, err := toAPIJob(job)
	if err != nil {
		return e.errorf("%v", err)
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	resp, _, err := client.Jobs().RegisterOpts(apiJob, ro, nil)
	if err != nil {
		if strings.Contains(err.Error(), nomadapi.RegisterEnforceIndexErrPrefix) {
			current := "its current job modify index is unknown"
			var ue nomadapi.UnexpectedResponseError
			switch stored, _, ierr := client.Jobs().Info(job.ID, nil); {
			case ierr == nil && stored.JobModifyIndex != nil:
				current = fmt.Sprintf("its current job modify index is %d", *stored.JobModifyIndex)
			case errors.As(ierr, &ue) && ue.StatusCode() == http.StatusNotFound:
				current = "the job does not exist"
			case ierr != nil:
				current += fmt.Sprintf(" (%s)", describe(ierr, addr.Addr))
			}
			return e.errorf("job %q not registered: the -check-index condition failed (%s); %s", job.ID, describe(err, addr.Addr), current)
		}
		return e.errorf("failed to register job %q: %s", job.ID, describe(err, addr.Addr))
	}
	if resp.Warnings != "" && parsed.warnings == 0 { // local warnings were printed already
		fmt.Fprintln(e.stderr, "Job Warnings:")
		for _, l := range strings.Split(strings.TrimRight(resp.Warnings, "\n"), "\n") {
			fmt.Fprintln(e.stderr, escapeUnprintable(l))
		}
	}
	if *detach {
		fmt.Fprintf(e.stdout, "Job registration successful\nEvaluation ID: %s\n", resp.EvalID)
		return exitOK
	}
	counts := make(map[string]int, len(job.TaskGroups))
	for _, tg := range job.TaskGroups {
		counts[tg.Name] = tg.Count
	}
	if ro.PreserveCounts { // the servers kept the counts the job had
		if stored, _, err := client.Jobs().Info(job.ID, nil); err == nil {
			for _, tg := range stored.TaskGroups {
				if tg.Name != nil && tg.Count != nil {
					counts[*tg.Name] = *tg.Count
				}
			}
		}
	}
	m := newMonitor(resp.EvalID, job.Type, counts)
	return e.follow(client, addr.Addr, job.ID, resp.EvalID, m)
}

// registerFlags adds Nomad's -check-index and -preserve-counts to fs and
// returns the options they set once fs is parsed.
func registerFlags(fs *flag.FlagSet) *nomadapi.RegisterOptions {
	ro := &nomadapi.RegisterOptions{}
	fs.Func("check-index", "register only if the job's modify index is this one (0: only if the job is new)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not a job modify index: %q", v)
		}
		ro.EnforceIndex, ro.ModifyIndex = true, n
		return nil
	})
	fs.BoolVar(&ro.PreserveCounts, "preserve-counts", false, "keep the current count of each group the job already has")
	return ro
}

// follow runs the monitor loop: one blocking query on the job's
// allocations per round, then the evaluation.
func (e *env) follow(client *nomadapi.Client, addr, jobID, evalID string, m *monitor) int {
	e.progress(true, "Monitoring evaluation %q", short(evalID))
	var index uint64
	for {
		q := (&nomadapi.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(e.ctx)
		allocs, qm, err := client.Jobs().Allocations(jobID, true, q)
		if err != nil {
			if e.ctx.Err() != nil {
				return e.interrupted(jobID)
			}
			return e.errorf("failed to query allocations of job %q: %s", jobID, describe(err, addr))
		}
		ev, _, err := client.Evaluations().Info(evalID, (&nomadapi.QueryOptions{}).WithContext(e.ctx))
		if err != nil && !isNotFound(err) {
			if e.ctx.Err() != nil {
				return e.interrupted(jobID)
			}
			return e.errorf("failed to query evaluation %q: %s", evalID, describe(err, addr))
		}
		lines, out := m.observe(ev, allocs)
		for _, l := range lines {
			e.progress(false, "%s", l)
		}
		switch out {
		case succeeded:
			e.progress(true, "Job %q is running", jobID)
			return exitOK
		case failed:
			e.progress(true, "Deployment of job %q failed", jobID)
			return exitDeployFail
		}
		index = qm.LastIndex
	}
}

// progress prints a Nomad-style monitor line; head lines start with "==>".
func (e *env) progress(head bool, format string, args ...any) {
	prefix := "    "
	if head {
		prefix = "==> "
	}
	fmt.Fprintf(e.stdout, "%s%s: %s\n", prefix, time.Now().Format(time.RFC3339), escapeUnprintable(fmt.Sprintf(format, args...)))
}

func (e *env) interrupted(jobID string) int {
	fmt.Fprintf(e.stderr, "Monitoring interrupted; job %q stays registered (see 'meshlet job status %s')\n", jobID, jobID)
	return exitInterrupted
}

func runJobStop(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	purge := fs.Bool("purge", false, "also remove the job from the agent")
	detach := fs.Bool("detach", false, "return at once, without waiting for allocations to stop")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return e.usageError(c, "expected exactly one argument: the JOB ID")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	job, err := resolveJob(client, fs.Arg(0))
	if err != nil {
		return e.errorf("failed to stop job %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	jobID := deref(job.ID)
	evalID, _, err := client.Jobs().Deregister(jobID, *purge, nil)
	if err != nil {
		return e.errorf("failed to stop job %q: %s", jobID, describe(err, addr.Addr))
	}
	if *detach {
		fmt.Fprintf(e.stdout, "Job %q stopped\nEvaluation ID: %s\n", jobID, evalID)
		return exitOK
	}
	e.progress(true, "Stopping job %q (evaluation %q)", jobID, short(evalID))
	m := newMonitor(evalID, "", nil)
	var index uint64
	for {
		q := (&nomadapi.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(e.ctx)
		allocs, qm, err := client.Jobs().Allocations(jobID, true, q)
		if err != nil && !isNotFound(err) {
			if e.ctx.Err() != nil {
				return e.interrupted(jobID)
			}
			return e.errorf("failed to query allocations of job %q: %s", jobID, describe(err, addr.Addr))
		}
		for _, l := range m.trackAllocs(allocs) {
			e.progress(false, "%s", l)
		}
		if allStopped(allocs) {
			e.progress(true, "Job %q stopped", jobID)
			return exitOK
		}
		index = qm.LastIndex
	}
}

// allStopped reports whether no allocation is still running or pending.
func allStopped(allocs []*nomadapi.AllocationListStub) bool {
	for _, a := range allocs {
		if a.ClientStatus == "running" || a.ClientStatus == "pending" {
			return false
		}
	}
	return true
}
