package command

import (
	"context"
	"encoding/json"
	"fmt"
	nomadapi "github.com/hashicorp/nomad/api"
	"regexp"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

func intp(v int) *int { return &v }

// connectJob is a bridge-mode group with an app task and an injected
// connect sidecar, as the scheduler would hand it out.
func connectJob() *structs.Job {
	return &structs.Job{ID: "countdash", Name: "countdash", Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{
		Name: "api", Count: 1,
		Networks: []*structs.NetworkResource{{Mode: structs.NetworkModeBridge,
			DynamicPorts:  []structs.Port{{Label: "connect-proxy-count-api", To: -1}},
			ReservedPorts: []structs.Port{{Label: "http", Value: 9001, To: 9001}}}},
		Tasks: []*structs.Task{
			{Name: "web", Driver: "raw_exec", Resources: &structs.Resources{CPU: intp(100), MemoryMB: intp(64)}},
			{Name: "connect-proxy-count-api", Driver: "raw_exec", Kind: "connect-proxy:count-api",
				Lifecycle: &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPrestart, Sidecar: true},
				Resources: &structs.Resources{CPU: intp(250), MemoryMB: intp(128)}},
		},
	}}}
}

// placeConnectJob registers connectJob and gives its allocation ports and
// a namespace address, as the client would report them.
func placeConnectJob(t *testing.T, fb *apitest.Backend) string {
	t.Helper()
	if _, err := fb.RegisterJob(context.Background(), connectJob(), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	id := fb.Allocations()[0].ID
	fb.UpdateAlloc(id, func(a *structs.Allocation) {
		a.AllocatedResources = &structs.AllocatedResources{Shared: structs.AllocatedSharedResources{
			Networks: a.Job.TaskGroups[0].Networks,
			Ports: []structs.PortMapping{
				{Label: "connect-proxy-count-api", Value: 21000, To: 21000, HostIP: "127.0.0.1"},
				{Label: "http", Value: 9001, To: 9001, HostIP: "127.0.0.1"},
			},
		}}
		a.NetworkStatus = &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "172.26.64.5"}
	})
	return id
}

func TestAllocStatus(t *testing.T) {
	fb := newAgent(t)
	id := placeConnectJob(t, fb)
	r := runCLI(t, "", "alloc", "status", id[:6])
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := []string{
		`(?m)^ID\s+= ` + id + `$`,
		`(?m)^Client Status\s+= running$`,
		`Allocation Addresses \(mode = "bridge"\):`,
		`(?m)^Label\s+Dynamic\s+Address$`,
		`(?m)^connect-proxy-count-api\s+yes\s+127\.0\.0\.1:21000 -> 21000$`,
		`(?m)^http\s+no\s+127\.0\.0\.1:9001 -> 9001$`,
		`(?m)^Allocation Address: 172\.26\.64\.5$`,
		`(?s)Task "connect-proxy-count-api" \(prestart sidecar\) is "running".*Task "web" is "running"`,
		`(?m)^250 MHz\s+128 MiB$`,
		`(?m)^Time\s+Type\s+Description$`,
		`(?m)^\S+\s+Started\s+Task started by client$`,
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("alloc status does not match %s:\n%s", re, r.stdout)
		}
	}

	js := runCLI(t, "", "alloc", "status", "-json", id[:6])
	var raw map[string]any
	if js.code != 0 || json.Unmarshal([]byte(js.stdout), &raw) != nil || raw["ID"] != id {
		t.Fatalf("alloc status -json: %d %q %q", js.code, js.stdout, js.stderr)
	}
	if miss := runCLI(t, "", "alloc", "status", "ffffffff"); miss.code != 1 || !strings.Contains(miss.stderr, "(HTTP 404)") {
		t.Fatalf("unknown alloc: %d %q", miss.code, miss.stderr)
	}
}

func TestAllocLogs(t *testing.T) {
	fb := newAgent(t)
	multi := placeConnectJob(t, fb)
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	var single string
	for _, a := range fb.Allocations() {
		if a.JobID == "web" {
			single = a.ID
		}
	}
	var all strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	fb.AppendTaskLog("app", "stdout", all.String())
	fb.AppendTaskLog("app", "stderr", "warning: disk almost full\n")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		stdout   string
		stderr   string
	}{
		{"whole stdout", []string{single[:8]}, 0, all.String(), ""},
		{"named task", []string{single, "app"}, 0, all.String(), ""},
		{"stderr", []string{"-stderr", single}, 0, "warning: disk almost full\n", ""},
		{"tail default", []string{"-tail", single}, 0, "line 11\n" + strings.SplitN(all.String(), "line 11\n", 2)[1], ""},
		{"last three", []string{"-n", "3", single}, 0, "line 18\nline 19\nline 20\n", ""},
		{"several tasks", []string{multi}, 1, "", "has 2 tasks; name one of: connect-proxy-count-api, web"},
		{"unknown task", []string{single, "db"}, 1, "", `has no task "db"; tasks: app`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"alloc", "logs"}, tc.args...)...)
			if r.code != tc.wantCode || r.stdout != tc.stdout || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want %d %q %q", r.code, r.stdout, r.stderr, tc.wantCode, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestAllocLogsFollow: -f prints what exists, then new output, until the
// context ends (Ctrl-C); with -n it starts from the last lines.
func TestAllocLogsFollow(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		first string
	}{
		{"from start", []string{"-f"}, "a\nb\nc\n"},
		{"last line", []string{"-f", "-n", "1"}, "c\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fb := newAgent(t)
			if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
				t.Fatalf("run: %s", r.stderr)
			}
			fb.AppendTaskLog("app", "stdout", "a\nb\nc\n")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args := append(append([]string{"alloc", "logs"}, tc.flags...), fb.Allocations()[0].ID)
			stdout, stderr, done := startCLI(ctx, args...)
			testutil.WaitFor(t, hangGuard, "existing lines", func() bool { return stdout.String() == tc.first })
			fb.AppendTaskLog("app", "stdout", "d\n")
			testutil.WaitFor(t, hangGuard, "followed line", func() bool { return stdout.String() == tc.first+"d\n" })
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
		})
	}
}

func TestAllocExec(t *testing.T) {
	fb := newAgent(t)
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	id := fb.Allocations()[0].ID
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		stdout   string
		stderr   string
	}{
		{"stdin and exit code", []string{"-task", "app", id[:8], "/bin/sh", "-c", "read x; echo got:$x; echo err >&2; exit 4"}, "hi\n", 4, "got:hi\n", "err\n"},
		{"single task implied", []string{id, "/bin/echo", "ok"}, "", 0, "ok\n", ""},
		{"no stdin", []string{"-i=false", id, "/bin/cat"}, "ignored\n", 0, "", ""},
		{"missing binary", []string{id, "/nonexistent/meshlet-x"}, "", 1, "", "Error: failed to exec in task \"app\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.stdin, append([]string{"alloc", "exec"}, tc.args...)...)
			if r.code != tc.wantCode || r.stdout != tc.stdout || !strings.HasPrefix(r.stderr, tc.stderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want %d %q %q", r.code, r.stdout, r.stderr, tc.wantCode, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestWriteAllocChecks(t *testing.T) {
	var b strings.Builder
	writeAllocChecks(&b, nomadapi.AllocCheckStatuses{
		"service:web-1:1":               {Check: "alive", Service: "web", Status: "critical", Output: "HTTP GET http://127.0.0.1:8080/health: 503 Service Unavailable Output: down\n"},
		"service:web-1-sidecar-proxy:1": {Check: "Connect Sidecar Listening", Service: "web-sidecar-proxy", Status: "passing"},
	})
	out := b.String()
	for _, re := range []string{`(?m)^Service Checks:$`, `(?m)^Service\s+Check\s+Status\s+Output$`,
		`(?m)^web\s+alive\s+critical\s+HTTP GET http://127\.0\.0\.1:8080/health: 503 Service Unavai\.\.\.$`,
		`(?m)^web-sidecar-proxy\s+Connect Sidecar Listening\s+passing\s+<none>$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}
	b.Reset()
	writeAllocChecks(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no checks printed %q", b.String())
	}
}
