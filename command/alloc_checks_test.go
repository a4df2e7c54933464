package command

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/structs"
)

// `alloc status` asks for the service checks only when the allocation
// may have some (a declared check or a connect sidecar) and still runs;
// a node that does not answer costs at most checksTimeout and a warning.
func TestAllocStatusChecks(t *testing.T) {
	fb := newAgent(t)
	id := placeConnectJob(t, fb)
	long := strings.Repeat("é", 70)
	fb.SetAllocChecks(id, nomadapi.AllocCheckStatuses{
		"c1": {Check: "Connect Sidecar Listening", Service: "count-api-sidecar-proxy", Status: "success", Output: long},
	})
	r := runCLI(t, "", "alloc", "status", id[:8])
	if r.code != 0 || fb.AllocChecksCalls() != 1 || !strings.Contains(r.stdout, "Service Checks:") {
		t.Fatalf("connect allocation: exit %d, %d checks calls, stdout %q, stderr %q", r.code, fb.AllocChecksCalls(), r.stdout, r.stderr)
	}
	if want := strings.Repeat("é", 57) + "..."; !strings.Contains(r.stdout, want) || !utf8.ValidString(r.stdout) {
		t.Errorf("output not cut to 60 characters on a rune boundary:\n%s", r.stdout)
	}

	// A group without checks or sidecars: no checks request.
	if run := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); run.code != 0 {
		t.Fatalf("run: %s", run.stderr)
	}
	var web string
	for _, a := range fb.Allocations() {
		if a.JobID == "web" {
			web = a.ID
		}
	}
	if r := runCLI(t, "", "alloc", "status", web); r.code != 0 || fb.AllocChecksCalls() != 1 || strings.Contains(r.stdout, "Service Checks") {
		t.Fatalf("allocation without checks: exit %d, %d checks calls (want still 1), stdout %q", r.code, fb.AllocChecksCalls(), r.stdout)
	}

	// A node that does not answer.
	defer func(d time.Duration) { checksTimeout = d }(checksTimeout)
	checksTimeout = 200 * time.Millisecond
	fb.SetChecksHook(func(ctx context.Context) { <-ctx.Done() })
	start := time.Now()
	r = runCLI(t, "", "alloc", "status", id[:8])
	if r.code != 0 || time.Since(start) > 5*time.Second || !strings.Contains(r.stderr, "did not answer within 200ms") ||
		!strings.Contains(r.stdout, "Client Status") || strings.Contains(r.stdout, "Service Checks") {
		t.Fatalf("hanging node: exit %d after %s, stdout %q, stderr %q", r.code, time.Since(start), r.stdout, r.stderr)
	}
	fb.SetChecksHook(nil)

	// A terminal allocation: no checks request.
	calls := fb.AllocChecksCalls()
	fb.UpdateAlloc(id, func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusComplete })
	if r := runCLI(t, "", "alloc", "status", id[:8]); r.code != 0 || fb.AllocChecksCalls() != calls {
		t.Fatalf("terminal allocation: exit %d, %d checks calls (want %d), stderr %q", r.code, fb.AllocChecksCalls(), calls, r.stderr)
	}
}
