package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// Nomad's container options through the agent, in a bridge allocation:
// the group network's hostname (interpolated) and dns block, and the
// task's extra_hosts, ulimit, readonly_rootfs and security_opt, as the
// container sees them.
func TestContainerOptionsThroughAgent(t *testing.T) {
	a := newAgent(t, framework.Options{})
	r := a.CLI("job", "run", "input/options.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "options") })
	alloc := a.RunningAllocs("options", 1)[0]
	var out string
	a.Eventually(30*time.Second, "the task's report in alloc logs", func() bool {
		out = a.CLI("alloc", "logs", alloc.ID, "t").Stdout
		return strings.Contains(out, "done")
	})
	for _, want := range []string{"opts-0\n", "nameserver 192.0.2.53\n", "search grp.example\n",
		"192.0.2.10\tdb.internal\n", "\n1024\n", "rootfs-ro\n", "NoNewPrivs:\t1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("alloc logs lack %q:\n%s", want, out)
		}
	}
}
