package terminating

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// exampleJob writes jobspecs/terminating-gateway.hcl with the
// dashboard's static host port replaced by a free one.
func exampleJob(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../jobspecs/terminating-gateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	if !strings.Contains(s, "static = 9002") {
		t.Fatal("jobspecs/terminating-gateway.hcl no longer has the dashboard's static = 9002")
	}
	s = strings.Replace(s, "static = 9002", "static = "+strconv.Itoa(testutil.FreePort(t)), 1)
	path := filepath.Join(t.TempDir(), "terminating-gateway.hcl")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// countVia GETs count-api through the dashboard's upstream listener, from
// inside the dashboard's allocation.
func countVia(a *framework.Agent, allocID string) (bool, framework.CLIResult) {
	r := a.Exec(allocID, "dashboard", a.Bin, "demo-app", "get", "-timeout", "2s", "http://127.0.0.1:8080/")
	return r.Code == 0 && strings.Contains(r.Stdout, "count"), r
}

// TestTerminatingExample runs the example jobspec: the dashboard reaches
// count-api, a plain service with no sidecar, only through the gateway,
// whose intentions judge count-dashboard against count-api.
func TestTerminatingExample(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob(exampleJob(t))
	allocs := a.RunningAllocs(job, 3)
	dash := a.AllocByGroup(allocs, "dashboard")
	a.Eventually(60*time.Second, "count-api through the terminating gateway", func() bool { ok, _ := countVia(a, dash.ID); return ok })

	if out := a.MustCLI("alloc", "status", a.AllocByGroup(allocs, "gateway").ID); !strings.Contains(out, "Terminating Gateway: api-gateway") {
		t.Errorf("alloc status lacks the gateway:\n%s", out)
	}
	a.MustCLI("intention", "create", "-deny", "count-dashboard", "count-api")
	a.Eventually(10*time.Second, "the deny to refuse the dashboard", func() bool { ok, _ := countVia(a, dash.ID); return !ok })
	a.MustCLI("intention", "delete", "count-dashboard", "count-api")
	a.Eventually(10*time.Second, "count-api after deleting the deny", func() bool { ok, _ := countVia(a, dash.ID); return ok })
}
