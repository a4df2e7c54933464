package command

import (
	"regexp"
	"testing"

	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

func TestNodeStatus(t *testing.T) {
	fb := newAgent(t)
	fb.AddNode(&structs.Node{ID: "a0b1c2d3-0000-4000-8000-000000000002", Name: "dev-2", Datacenter: "dc1", Status: "down",
		Drivers: map[string]*structs.DriverInfo{"docker": {Detected: false, HealthDescription: "docker not found"}}})
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
