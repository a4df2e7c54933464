package command

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestAgentCommand starts the real agent in-process on loopback with free
// ports, talks to it with the CLI, and stops it as a signal would.
func TestAgentCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, "agent.hcl", fmt.Sprintf(`
data_dir  = %q
bind_addr = "127.0.0.1"
ports {
  http         = 0
  connect_http = 0
  grpc         = 0
  rpc          = 0
}
`, filepath.Join(dir, "data")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, done := startCLI(ctx, "agent", "-config", cfg, "-log-level", "warn")
	addrRE := regexp.MustCompile(`HTTP API\s+= (http://127\.0\.0\.1:\d+)`)
	testutil.WaitFor(t, hangGuard, "the agent banner", func() bool {
		select {
		case code := <-done:
			t.Fatalf("agent exited early with %d:\n%s%s", code, stdout, stderr)
		default:
		}
		return addrRE.MatchString(stdout.String())
	})
	addr := addrRE.FindStringSubmatch(stdout.String())[1]
	// ACLs are off: one startup warning (the log level is warn).
	if n := strings.Count(stderr.String(), "[WARN]  meshlet: ACLs are disabled: any program that reaches the HTTP APIs"); n != 1 {
		t.Errorf("the ACL warning is logged %d times:\n%s", n, stderr)
	}
	testutil.WaitFor(t, hangGuard, "a ready node", func() bool {
		r := runCLI(t, "", "node", "status", "-address", addr)
		return r.code == 0 && strings.Contains(r.stdout, "ready")
	})
	if r := runCLI(t, "", "job", "status", "-address", strings.TrimPrefix(addr, "http://")); r.code != 0 || !strings.Contains(r.stdout, "No running jobs") {
		t.Fatalf("job status against the agent: %d %q %q", r.code, r.stdout, r.stderr)
	}
	cancel()
	if code := <-done; code != 0 || !strings.Contains(stdout.String(), "==> Agent stopped") {
		t.Fatalf("agent exit %d:\n%s%s", code, stdout, stderr)
	}
}

func TestAgentCommandErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"agent"}, "Error: specify -dev, -config FILE or -data-dir DIR"},
		{[]string{"agent", "-config", "/nonexistent/agent.hcl"}, "Error: failed to load agent config"},
		{[]string{"agent", "-dev", "-log-level", "loud"}, `Error: invalid log level "loud"`},
		{[]string{"agent", "-dev", "-bind", "not-an-ip"}, "Error: invalid agent configuration"},
		{[]string{"agent", "-dev", "extra"}, "Error: agent takes no arguments"},
	}
	for _, tc := range tests {
		r := runCLI(t, "", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%v: exit %d stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
