package command

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

func TestNodeStatus(t *testing.T) {
	fb := newAgent(t)
	fb.AddNode(&structs.Node{ID: "a0b1c2d3-0000-4000-8000-000000000002", Name: "dev-2", Datacenter: "dc1", Status: "down",
		Drivers:           map[string]*structs.DriverInfo{"docker": {Detected: false, HealthDescription: "docker not found"}},
		Attributes:        map[string]string{"kernel.name": "linux"},
		NodeResources:     &structs.NodeResources{Cpu: structs.NodeCpuResources{CpuShares: 5000}, Memory: structs.NodeMemoryResources{MemoryMB: 2048}},
		ReservedResources: &structs.NodeReservedResources{Cpu: structs.NodeReservedCpuResources{CpuShares: 500}}})
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	tests := []struct {
		args     []string
		wantCode int
		want     []string
	}{
		{[]string{"node", "status"}, 0, []string{`(?m)^ID\s+DC\s+Name\s+Drain\s+Eligibility\s+Status$`,
			`(?m)^f3a1c2d4\s+dc1\s+dev-1\s+false\s+eligible\s+ready$`, `(?m)^a0b1c2d3\s+dc1\s+dev-2\s+false\s+eligible\s+down$`}},
		{[]string{"node", "status", "f3a1"}, 0, []string{`(?m)^ID\s+= ` + apitest.NodeID + `$`, `(?m)^Drivers\s+= raw_exec$`,
			`(?m)^raw_exec\s+true\s+true\s+Healthy$`, `(?m)^[0-9a-f]{8}\s+web\s+web\s+run\s+running\s+\d+s ago$`}},
		{[]string{"node", "status", "a0b1"}, 0, []string{`(?m)^Drivers\s+= <none>$`, `(?m)^docker\s+false\s+false\s+docker not found$`, `No allocations placed`}},
		{[]string{"node", "status", "-verbose"}, 0, []string{`(?m)^ID\s+DC\s+Name\s+Address\s+Version\s+Drain\s+Eligibility\s+Status$`,
			`(?m)^a0b1c2d3-0000-4000-8000-000000000002\s+dc1\s+dev-2\s`}},
		{[]string{"node", "status", "-verbose", "a0b1"}, 0, []string{`(?m)^Total\s+5000\s+2048\s+0$`, `(?m)^Reserved\s+500\s+0\s+0$`,
			`(?m)^kernel\.name\s+= linux$`}},
	}
	for _, tc := range tests {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.wantCode {
			t.Fatalf("%v: exit %d (%s)", tc.args, r.code, r.stderr)
		}
		for _, re := range tc.want {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("%v: output does not match %s:\n%s", tc.args, re, r.stdout)
			}
		}
	}
	if r := runCLI(t, "", "node", "status", "ffff"); r.code != 1 || !regexp.MustCompile(`Error: failed to query node "ffff": .*\(HTTP 404\)`).MatchString(r.stderr) {
		t.Fatalf("unknown node: %d %q", r.code, r.stderr)
	}
}

// TestNodeDrainAndEligibility runs eligibility and drain against the fake
// agent, whose drain stops the node's allocations at once and completes.
func TestNodeDrainAndEligibility(t *testing.T) {
	fb := newAgent(t)
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	id := apitest.NodeID
	steps := []struct {
		stdin string
		args  []string
		want  []string
	}{
		{"", []string{"node", "eligibility", "-disable", id}, []string{`^Node "` + id + `" scheduling eligibility set: ineligible for scheduling\n$`}},
		{"", []string{"node", "status"}, []string{`(?m)^f3a1c2d4\s+dc1\s+dev-1\s+false\s+ineligible\s+ready$`}},
		{"", []string{"node", "eligibility", "-enable", id}, []string{`scheduling eligibility set: eligible for scheduling`}},
		{"", []string{"node", "drain", "-enable", "-yes", "f3a1"}, []string{
			`(?m)^\S+: Ctrl-C to stop monitoring: will not cancel the node drain$`,
			`(?m)^\S+: Node "` + id + `" drain strategy set$`,
			`(?m)^\S+: Drain complete for node ` + id + `$`,
			`(?m)^\S+: All allocations on node "` + id + `" have stopped$`}},
		{"", []string{"node", "status", "f3a1"}, []string{`(?m)^Drain\s+= false$`, `(?m)^Eligibility\s+= ineligible$`,
			`(?m)^[0-9a-f]{8}\s+web\s+web\s+stop\s+complete\s+`}},
		{"n\n", []string{"node", "drain", "-disable", "f3a1"}, []string{`Are you sure you want to disable drain mode for node "` + id + `"\? \[y/N\] Canceling drain toggle`}},
		{"y\n", []string{"node", "drain", "-disable", "f3a1"}, []string{`(?m)Node "` + id + `" drain strategy unset$`}},
		{"", []string{"node", "status"}, []string{`(?m)^f3a1c2d4\s+dc1\s+dev-1\s+false\s+eligible\s+ready$`}},
		{"", []string{"node", "drain", "-enable", "-detach", "-force", id}, []string{`^Node "` + id + `" drain strategy set\n$`}},
		{"", []string{"node", "drain", "-disable", "-keep-ineligible", id}, []string{`drain strategy unset`}},
		{"", []string{"node", "status"}, []string{`(?m)^f3a1c2d4\s+dc1\s+dev-1\s+false\s+ineligible\s+ready$`}},
	}
	for _, s := range steps {
		r := runCLI(t, s.stdin, s.args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d (%s)", s.args, r.code, r.stderr)
		}
		for _, re := range s.want {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("%v: output does not match %s:\n%s", s.args, re, r.stdout)
			}
		}
	}

	// -self finds the node named as the agent ("meshlet" for the fake).
	fb.AddNode(&structs.Node{ID: "5e1f0000-0000-4000-8000-000000000003", Name: "meshlet", Datacenter: "dc1", Status: "ready"})
	r := runCLI(t, "", "node", "eligibility", "-disable", "-self")
	if r.code != 0 || !strings.Contains(r.stdout, `Node "5e1f0000-0000-4000-8000-000000000003" scheduling eligibility set: ineligible`) {
		t.Fatalf("-self: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestNodeDrainAndEligibilityErrors(t *testing.T) {
	fb := newAgent(t)
	fb.AddNode(&structs.Node{ID: "f3a1ffff-0000-4000-8000-000000000002", Name: "dev-2", Datacenter: "dc1", Status: "ready",
		Drain: true, DrainStrategy: &structs.DrainStrategy{}, SchedulingEligibility: "ineligible"})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"node", "eligibility", "f3a1"}, `either the '-enable' or '-disable' flag must be set`},
		{[]string{"node", "eligibility", "-enable", "-disable", "f3a1"}, `either the '-enable' or '-disable' flag must be set`},
		{[]string{"node", "eligibility", "-enable"}, `expected exactly one argument: the NODE ID (or -self)`},
		{[]string{"node", "eligibility", "-enable", "-self", "f3a1"}, `expected exactly one argument`},
		{[]string{"node", "eligibility", "-enable", "ffff"}, `Error: no node(s) with prefix or id "ffff" found`},
		{[]string{"node", "eligibility", "-enable", "f"}, `identifier must contain at least two characters`},
		{[]string{"node", "eligibility", "-enable", "f3a1"}, `prefix "f3a1" matched multiple nodes: ` + apitest.NodeID + `, f3a1ffff-`},
		{[]string{"node", "eligibility", "-enable", "f3a1ff"}, `node f3a1ffff-0000-4000-8000-000000000002 is draining: can not set its scheduling eligibility to eligible (HTTP 400)`},
		{[]string{"node", "drain", "-disable", "-deadline", "1h", "f3a1ff"}, `-disable can't be combined with flags configuring drain strategy`},
		{[]string{"node", "drain", "-enable", "-deadline", "1h", "-force", "f3a1ff"}, `-deadline can't be combined with -force or -no-deadline`},
		{[]string{"node", "drain", "-enable", "-force", "-no-deadline", "f3a1ff"}, `-force and -no-deadline are mutually exclusive`},
		{[]string{"node", "drain", "-enable", "-deadline", "-5m", "f3a1ff"}, `a positive drain duration must be given`},
		{[]string{"node", "drain", "-enable", "-deadline", "soon", "f3a1ff"}, `failed to parse deadline "soon"`},
		{[]string{"node", "drain", "f3a1ff"}, `either the '-enable' or '-disable' flag must be set`},
		{[]string{"node", "drain", "-enable", "-self"}, `cannot tell the agent's own node: 0 nodes are named "meshlet"`},
	}
	for _, tc := range tests {
		r := runCLI(t, "", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// A prefix without -yes and no answer changes nothing.
	r := runCLI(t, "maybe\n", "node", "drain", "-enable", "f3a1c")
	if r.code != 1 || !strings.Contains(r.stdout, "an exact 'y' is required") {
		t.Errorf("unconfirmed drain: %d %q", r.code, r.stdout)
	}
	if n, _ := fb.GetNode(context.Background(), apitest.NodeID); n.Draining() || !n.Eligible() {
		t.Errorf("unconfirmed drain changed the node: drain %v eligibility %q", n.Drain, n.SchedulingEligibility)
	}
}
