package command

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// hangGuard bounds tests that wait on the CLI; it is not a timing assertion.
const hangGuard = 60 * time.Second

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name       string
		src        string
		wantCode   int
		wantOut    string
		wantStderr []string // regexps
	}{
		{"valid", webJobHCL, 0, "Job validation successful", nil},
		// The server's job_max_count may be above the default: it is
		// checked at submission.
		{"count over the default bound", strings.Replace(webJobHCL, "count = 2", "count = 15000", 1), 0, "Job validation successful", nil},
		{"unknown attribute", "job \"web\" {\n  group \"web\" {\n    bogus = 1\n    task \"app\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/true\"\n      }\n    }\n  }\n}\n",
			1, "", []string{`bad\.hcl:3:5: error: Unsupported argument`, `Error: job validation failed: 1 error\(s\)`}},
		{"syntax error", "job \"web\" {\n  group \"web\" {\n", 1, "", []string{`bad\.hcl:\d+:\d+: error: `}},
		{"warning only", "job \"web\" {\n  group \"web\" {\n    ephemeral_disk {\n      size = 300\n    }\n    task \"app\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/true\"\n      }\n    }\n  }\n}\n",
			0, "Job validation successful", []string{`bad\.hcl:3:5: warning: ephemeral_disk is not supported`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "bad.hcl", tc.src)
			r := runCLI(t, "", "job", "validate", path)
			if r.code != tc.wantCode || !strings.Contains(r.stdout, tc.wantOut) {
				t.Fatalf("exit %d stdout %q stderr %q; want %d and %q", r.code, r.stdout, r.stderr, tc.wantCode, tc.wantOut)
			}
			for _, re := range tc.wantStderr {
				if !regexp.MustCompile(re).MatchString(r.stderr) {
					t.Fatalf("stderr %q does not match %s", r.stderr, re)
				}
			}
		})
	}
}

func TestJobRunInvalidRegistersNothing(t *testing.T) {
	fb := newAgent(t)
	path := writeFile(t, "bad.hcl", "job \"web\" {\n  group \"web\" {\n    bogus = 1\n  }\n}\n")
	r := runCLI(t, "", "job", "run", path)
	if r.code != 1 || !strings.Contains(r.stderr, "bad.hcl:3:5: error:") || !strings.Contains(r.stderr, "nothing was registered") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	if ids := fb.JobIDs(); len(ids) != 0 {
		t.Fatalf("jobs registered: %v", ids)
	}
}

func TestJobRunDetach(t *testing.T) {
	fb := newAgent(t)
	r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL))
	if r.code != 0 || !strings.Contains(r.stdout, "Job registration successful") || !strings.Contains(r.stdout, "Evaluation ID: ") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if ids := fb.JobIDs(); len(ids) != 1 || ids[0] != "web" {
		t.Fatalf("jobs = %v", ids)
	}
}

// TestJobRunMonitor: the monitor follows pending allocations through
// blocking queries and exits 0 once every allocation runs, or 2 when one
// fails (the reason printed).
func TestJobRunMonitor(t *testing.T) {
	tests := []struct {
		name     string
		final    func(fb *apitest.Backend, id string)
		wantCode int
		want     []string
	}{
		{"all running", func(fb *apitest.Backend, id string) {
			fb.SetTaskStatus(id, structs.AllocClientStatusRunning, structs.TaskStateRunning, structs.TaskStarted, "Task started by client")
		}, 0, []string{`Allocation "[0-9a-f]{8}" created: node "dev-1", group "web"`, `All allocations are running`, `Job "web" is running`}},
		{"driver failure", func(fb *apitest.Backend, id string) {
			fb.SetTaskStatus(id, structs.AllocClientStatusFailed, structs.TaskStateDead, structs.TaskDriverFailure, "failed to launch /bin/sleep: permission denied")
		}, 2, []string{`Allocation "[0-9a-f]{8}" failed: task "app": Driver Failure: failed to launch /bin/sleep: permission denied`, `Deployment of job "web" failed`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fb := newAgent(t)
			fb.NewAllocStatus = structs.AllocClientStatusPending
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			stdout, stderr, done := startCLI(ctx, "job", "run", writeFile(t, "web.hcl", webJobHCL))
			testutil.WaitFor(t, hangGuard, "two allocations", func() bool { return len(fb.Allocations()) == 2 })
			for _, a := range fb.Allocations() {
				tc.final(fb, a.ID)
			}
			code := <-done
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(stdout.String()) {
					t.Fatalf("stdout does not match %s:\n%s", re, stdout)
				}
			}
		})
	}
}

func TestJobRunPlacementFailure(t *testing.T) {
	newAgent(t)
	r := runCLI(t, "", "job", "run", writeFile(t, "dock.hcl", dockerJobHCL))
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{`failed to place all allocations`, `Task Group "db" (failed to place 1 allocation):`, `* driver docker not available on node dev-1`} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	st := runCLI(t, "", "job", "status", "dock")
	if st.code != 0 || !strings.Contains(st.stdout, "Placement Failure") || !strings.Contains(st.stdout, "driver docker not available on node dev-1") {
		t.Fatalf("job status: %d\n%s%s", st.code, st.stdout, st.stderr)
	}
}

func TestJobStatus(t *testing.T) {
	fb := newAgent(t)
	if r := runCLI(t, "", "job", "status"); r.code != 0 || !strings.Contains(r.stdout, "No running jobs") {
		t.Fatalf("empty status: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	allocs := fb.Allocations()
	tests := []struct {
		args     []string
		wantCode int
		want     []string // regexps on stdout, or stderr when failing
	}{
		{[]string{"job", "status"}, 0, []string{`ID\s+Type\s+Priority\s+Status\s+Submit Date`, `web\s+service\s+50\s+running`}},
		{[]string{"job", "status", "web"}, 0, []string{`ID\s+= web`, `Summary`, `web\s+0\s+0\s+2\s+0\s+0\s+0`,
			`Allocations`, short(allocs[0].ID) + `\s+` + short(apitest.NodeID) + `\s+web\s+0\s+run\s+running\s+\d+s ago`}},
		{[]string{"job", "status", "we"}, 0, []string{`ID\s+= web`}},
		{[]string{"job", "status", "nope"}, 1, []string{`Error: no job with ID or prefix "nope"`}},
	}
	for _, tc := range tests {
		r := runCLI(t, "", tc.args...)
		out := r.stdout
		if tc.wantCode != 0 {
			out = r.stderr
		}
		if r.code != tc.wantCode {
			t.Fatalf("%v: exit %d, want %d (%s)", tc.args, r.code, tc.wantCode, r.stderr)
		}
		for _, re := range tc.want {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Fatalf("%v: output does not match %s:\n%s", tc.args, re, out)
			}
		}
	}
}

func TestJobStop(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantJobs  int
		wantWords string
	}{
		{"stop and wait", []string{"job", "stop", "web"}, 1, `Job "web" stopped`},
		{"purge detached", []string{"job", "stop", "-purge", "-detach", "web"}, 0, "Evaluation ID:"},
		{"unique prefix", []string{"job", "stop", "-detach", "we"}, 1, `Job "web" stopped`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fb := newAgent(t)
			if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
				t.Fatalf("run: %d %s", r.code, r.stderr)
			}
			r := runCLI(t, "", tc.args...)
			if r.code != 0 || !strings.Contains(r.stdout, tc.wantWords) {
				t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
			}
			if n := len(fb.JobIDs()); n != tc.wantJobs {
				t.Fatalf("jobs left = %d, want %d", n, tc.wantJobs)
			}
			for _, a := range fb.Allocations() {
				if a.DesiredStatus != structs.AllocDesiredStatusStop || a.ClientStatus == structs.AllocClientStatusRunning {
					t.Fatalf("allocation %s still %s/%s", a.ID, a.DesiredStatus, a.ClientStatus)
				}
			}
		})
	}
	newAgent(t)
	if r := runCLI(t, "", "job", "stop", "ghost"); r.code != 1 || !strings.Contains(r.stderr, `Error: failed to stop job "ghost": no job with ID or prefix "ghost"`) {
		t.Fatalf("stop of unknown job: %d %q", r.code, r.stderr)
	}
}

func TestJobRunVars(t *testing.T) {
	fb := newAgent(t)
	src := strings.Replace(webJobHCL, "count = 2", "count = var.n", 1) + "\nvariable \"n\" {\n  type    = number\n  default = 1\n}\n"
	r := runCLI(t, "", "job", "run", "-detach", "-var", "n=3", writeFile(t, "web.hcl", src))
	if r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	if n := len(fb.Allocations()); n != 3 {
		t.Fatalf("allocations = %d, want 3", n)
	}
	if r := runCLI(t, "", "job", "validate", "-var", "m=3", writeFile(t, "web.hcl", src)); r.code != 1 || !strings.Contains(r.stderr, "Undefined variable m") {
		t.Fatalf("undeclared -var: %d %q", r.code, r.stderr)
	}
}

// -var-file (HCL, or JSON for *.json) and NOMAD_VAR_<name> set jobspec
// variables, in Nomad's precedence: -var > -var-file (the later) > env >
// default; a file naming an undeclared variable warns.
func TestJobVarFilesAndEnv(t *testing.T) {
	src := strings.Replace(webJobHCL, "count = 2", "count = var.n", 1) + "\nvariable \"n\" {\n  type    = number\n  default = 1\n}\n"
	job := writeFile(t, "web.hcl", src)
	hclVars := writeFile(t, "vars.hcl", "n = 4\n")
	jsonVars := writeFile(t, "vars.json", `{"n": 5, "other": "x"}`)
	bad := writeFile(t, "bad.json", `[1]`)
	count := func(args ...string) (string, cliResult) {
		t.Helper()
		fb := newAgent(t)
		r := runCLI(t, "", append(append([]string{"job", "run", "-detach"}, args...), job)...)
		if r.code != 0 {
			return "", r
		}
		return fmt.Sprint(len(fb.Allocations())), r
	}
	t.Setenv("NOMAD_VAR_n", "3")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "3"}, // env over the default
		{[]string{"-var-file", hclVars}, "4"},
		{[]string{"-var-file", hclVars, "-var-file", jsonVars}, "5"},
		{[]string{"-var-file", jsonVars, "-var", "n=2"}, "2"},
	} {
		if got, r := count(c.args...); got != c.want {
			t.Errorf("job run %v with NOMAD_VAR_n=3: %s allocations (exit %d, %s), want %s", c.args, got, r.code, r.stderr, c.want)
		}
	}
	if r := runCLI(t, "", "job", "validate", "-var-file", jsonVars, job); r.code != 0 ||
		!strings.Contains(r.stderr, "vars.json: warning: Value for undeclared variable other") {
		t.Errorf("validate with an undeclared variable in a file: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "job", "validate", "-var-file", bad, job); r.code != 1 || !strings.Contains(r.stderr, "want a JSON object") {
		t.Errorf("validate with a bad JSON var file: exit %d, stderr %q", r.code, r.stderr)
	}
	// A file's values keep their types for an untyped variable, as Nomad's.
	listJob := writeFile(t, "list.hcl", strings.Replace(webJobHCL, "count = 2", "count = length(var.ports)", 1)+"\nvariable \"ports\" {}\n")
	for _, file := range []string{writeFile(t, "ports.json", `{"ports": [1, 2, 3]}`), writeFile(t, "ports.hcl", "ports = [1, 2, 3]\n")} {
		fb := newAgent(t)
		if r := runCLI(t, "", "job", "run", "-detach", "-var-file", file, listJob); r.code != 0 || len(fb.Allocations()) != 3 {
			t.Errorf("job run -var-file %s with a list: exit %d, %d allocations, stderr %q", filepath.Base(file), r.code, len(fb.Allocations()), r.stderr)
		}
	}
}

// TestJobStatusEscapesNames: names from the agent are printed with their
// control and bidi characters escaped, never raw (state written before
// validation rejected them may still hold such names).
func TestJobStatusEscapesNames(t *testing.T) {
	fb := newAgent(t)
	hostile := "web\u202egnp.exe\x1b[2J"
	job := &structs.Job{ID: hostile, Name: hostile, Type: structs.JobTypeService, Datacenters: []string{"dc\t1"},
		TaskGroups: []*structs.TaskGroup{{Name: "grp\x07", Count: 1, Tasks: []*structs.Task{{Name: "t", Driver: "raw_exec"}}}}}
	if _, err := fb.RegisterJob(context.Background(), job, api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"job", "status"}, {"job", "status", hostile}} {
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		if strings.ContainsAny(r.stdout, "\u202e\x1b\x07") {
			t.Fatalf("%v: raw control characters in output:\n%q", args, r.stdout)
		}
		if !strings.Contains(r.stdout, `"web\u202egnp.exe\x1b[2J"`) {
			t.Fatalf("%v: escaped ID missing:\n%s", args, r.stdout)
		}
	}
	r := runCLI(t, "", "job", "status", hostile)
	for _, want := range []string{`Datacenters = "dc\t1"`, `"grp\a"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %s:\n%s", want, r.stdout)
		}
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct{ in, quoted, escaped string }{
		{"web-1 api", "web-1 api", "web-1 api"},
		{"café", "café", "café"},
		{"a\u202eb", `"a\u202eb"`, `a\u202eb`},
		{"a\x1b[31mb", `"a\x1b[31mb"`, `a\x1b[31mb`},
		{"a\xffb", `"a\xffb"`, `a\xffb`},
		{"a\tb\n", `"a\tb\n"`, `a\tb\n`},
	}
	for _, tc := range tests {
		if got := printable(tc.in); got != tc.quoted {
			t.Errorf("printable(%q) = %s, want %s", tc.in, got, tc.quoted)
		}
		if got := escapeUnprintable(tc.in); got != tc.escaped {
			t.Errorf("escapeUnprintable(%q) = %s, want %s", tc.in, got, tc.escaped)
		}
	}
}

// job run -check-index registers only at the given job modify index (0:
// only a new job), and says so when the condition fails; -preserve-counts
// keeps the counts the job has.
func TestJobRunCheckIndexAndPreserveCounts(t *testing.T) {
	fb := newAgent(t)
	file := writeFile(t, "web.hcl", webJobHCL)
	if r := runCLI(t, "", "job", "run", "-detach", "-check-index", "0", file); r.code != 0 {
		t.Fatalf("check-index 0 on a new job: %d %s", r.code, r.stderr)
	}
	job, err := fb.GetJob(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	scaled := writeFile(t, "web5.hcl", strings.Replace(webJobHCL, "count = 2", "count = 5", 1))
	for _, index := range []string{"0", fmt.Sprint(job.JobModifyIndex + 1)} {
		r := runCLI(t, "", "job", "run", "-detach", "-check-index", index, scaled)
		if r.code != 1 || !strings.Contains(r.stderr, "the -check-index condition failed") || !strings.Contains(r.stderr, "Enforcing job modify index "+index) ||
			!strings.Contains(r.stderr, fmt.Sprintf("its current job modify index is %d", job.JobModifyIndex)) {
			t.Fatalf("check-index %s on the existing job: %d %q", index, r.code, r.stderr)
		}
	}
	if r := runCLI(t, "", "job", "run", "-detach", "-check-index", "x", scaled); r.code == 0 {
		t.Fatal("check-index x was accepted")
	}
	r := runCLI(t, "", "job", "run", "-detach", "-preserve-counts", "-check-index", fmt.Sprint(job.JobModifyIndex), scaled)
	if r.code != 0 {
		t.Fatalf("preserve-counts at the current index: %d %s", r.code, r.stderr)
	}
	if got, _ := fb.GetJob(context.Background(), "web"); got.TaskGroups[0].Count != 2 {
		t.Fatalf("preserve-counts: count %d, want 2", got.TaskGroups[0].Count)
	}
}

// TestJobStatusEscapesPlacementFailures: the placement failure reasons
// quote what the job's author wrote (a driver, a constraint's value); job
// status shows them escaped, as the job run monitor does, so that a job
// cannot send control sequences to the terminal of whoever inspects it.
func TestJobStatusEscapesPlacementFailures(t *testing.T) {
	fb := newAgent(t)
	job := &structs.Job{ID: "evil", Name: "evil", Type: structs.JobTypeService, Datacenters: []string{"dc1"},
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: []*structs.Task{{Name: "t", Driver: "d\x1b]0;pwned\x07\x1b[2J"}}}}}
	if _, err := fb.RegisterJob(context.Background(), job, api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "job", "status", "evil")
	if r.code != 0 || !strings.Contains(r.stdout, "Placement Failure") {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "\x1b\x07") {
		t.Errorf("raw control characters in output:\n%q", r.stdout)
	}
	if !strings.Contains(r.stdout, "\nPlacement Failure\nTask Group \"g\" (failed to place 1 allocation):\n  * driver d\\x1b]0;pwned\\a\\x1b[2J not available on node dev-1\n") {
		t.Errorf("escaped reason missing:\n%s", r.stdout)
	}
}
