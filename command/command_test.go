package command

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestHelp: -h on every command, group and the top level exits 0 and
// prints a usage line and an example on stdout.
func TestHelp(t *testing.T) {
	var invocations [][]string
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		invocations = append(invocations, append(strings.Fields(name), "-h"))
	}
	for _, g := range groups {
		invocations = append(invocations, []string{g.name, "-h"})
	}
	invocations = append(invocations, []string{"-h"}, []string{"help"})
	for _, args := range invocations {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, "", args...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "Usage: meshlet") || !strings.Contains(r.stdout, "Example") {
				t.Fatalf("help lacks usage or example:\n%s", r.stdout)
			}
		})
	}
}

// TestUsageErrors: wrong invocations exit non-zero with one "Error:" line
// and the usage, never a stack trace.
func TestUsageErrors(t *testing.T) {
	t.Setenv("MESHLET_ADDR", "http://127.0.0.1:1") // never reached
	tests := []struct {
		args     []string
		wantCode int
		want     string
	}{
		{nil, 1, "Usage: meshlet <command>"},
		{[]string{"frobnicate"}, 1, `Error: unknown command "frobnicate"`},
		{[]string{"job"}, 1, "Usage: meshlet job <subcommand>"},
		{[]string{"job", "launch"}, 1, `Error: unknown command "job launch"`},
		{[]string{"job", "run"}, 1, "Error: expected exactly one argument: the jobspec FILE"},
		{[]string{"job", "run", "-bogus", "x.hcl"}, 1, "Error: flag provided but not defined: -bogus"},
		{[]string{"job", "run", "-var", "novalue", "x.hcl"}, 1, "-var must be key=value"},
		{[]string{"job", "stop"}, 1, "Usage: meshlet job stop [options] JOB"},
		{[]string{"job", "status", "a", "b"}, 1, "expected at most one argument"},
		{[]string{"alloc", "status"}, 1, "expected exactly one argument: the ALLOC ID"},
		{[]string{"alloc", "status", ""}, 1, "expected exactly one argument: the ALLOC ID"},
		{[]string{"job", "stop", ""}, 1, "expected exactly one argument: the JOB ID"},
		{[]string{"alloc", "logs"}, 1, "expected ALLOC and an optional TASK"},
		{[]string{"alloc", "exec", "abcd"}, 1, "expected ALLOC and a COMMAND"},
		{[]string{"node", "status", "a", "b"}, 1, "expected at most one argument"},
		{[]string{"intention", "create", "web"}, 1, "expected two arguments: SRC DST"},
		{[]string{"intention", "create", "-allow", "-deny", "web", "db"}, 1, "mutually exclusive"},
		{[]string{"intention", "check", "web"}, 2, "expected two arguments: SRC DST"},
		{[]string{"intention", "check", "-bogus", "web", "db"}, 2, "flag provided but not defined"},
		{[]string{"version", "extra"}, 1, "version takes no arguments"},
		{[]string{"job", "status"}, 1, "cannot reach the meshlet agent at http://127.0.0.1:1"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, "", tc.args...)
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", r.code, tc.wantCode, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q does not contain %q", r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
				t.Fatalf("stack trace on stderr: %s", r.stderr)
			}
			if strings.HasPrefix(r.stderr, "Error:") && strings.Count(strings.SplitN(r.stderr, "\nUsage", 2)[0], "\n") > 1 {
				t.Fatalf("error is not one line: %q", r.stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	tests := []struct {
		commit string
		want   string
	}{
		{"", "meshlet v0.1.0\n"},
		{"3e387b5", "meshlet v0.1.0 (3e387b5)\n"},
	}
	for _, tc := range tests {
		old := GitCommit
		GitCommit = tc.commit
		r := runCLI(t, "", "version")
		GitCommit = old
		if r.code != 0 || r.stdout != tc.want {
			t.Fatalf("version = %d %q, want %q", r.code, r.stdout, tc.want)
		}
	}
}
