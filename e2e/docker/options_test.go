package docker

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// Nomad's container options through the agent, in a bridge allocation:
// the group network's hostname (interpolated) and dns block, and the
// task's extra_hosts, ulimit, readonly_rootfs, security_opt, init and
// pids_limit, and the allocation's line in /etc/hosts, as the container
// sees them.
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
		"192.0.2.10 db.internal\n", "\n1024\n", "rootfs-ro\n", "NoNewPrivs:\t1\n",
		"pid1=/sbin/docker-init -- sh -c", "pids.max=64\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("alloc logs lack %q:\n%s", want, out)
		}
	}
	// Nomad's /etc/hosts line for the allocation: its address, its hostname.
	if !allocHostsLine.MatchString(out) {
		t.Errorf("/etc/hosts lacks the allocation's \"<IPv4> opts-0\" line:\n%s", out)
	}
}

var allocHostsLine = regexp.MustCompile(`\n\d+\.\d+\.\d+\.\d+ opts-0\n`)
