// Package dockerhost tests meshlet next to a dockerd set up as Debian's
// docker.io service runs it: iptables on. Such a daemon, when it has to
// turn IP forwarding on itself (as on a fresh host), sets the FORWARD
// policy to DROP, and it loads br_netfilter, so traffic between two ports
// of meshlet's bridge passes FORWARD too. Allocations must still reach
// each other through the mesh, and host port mappings must still work.
//
// The daemon and the agent share a network namespace the test makes, so
// the daemon's rules never touch the host's firewall (the other test
// packages run beside this one). The test needs root and dockerd, and
// skips saying so otherwise.
package dockerhost

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// newNetNS makes a named network namespace with its loopback up and IP
// forwarding off (as a fresh host boots), removed when t ends.
func newNetNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("mldockerhost%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	path := filepath.Join("/run/netns", name)
	inNS(t, path, "ip", "link", "set", "lo", "up")
	inNS(t, path, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
	return path
}

// inNS runs a command in the namespace at path and returns its output.
func inNS(t *testing.T, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startDockerd runs a private dockerd with iptables on in the namespace
// at path, and makes sure its FORWARD policy is DROP (a daemon that found
// forwarding on would leave it ACCEPT: the test then sets it, so the case
// under test is always the strict one).
func startDockerd(t *testing.T, path string) *dockertest.Daemon {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd is not installed (apt-get install docker.io): ", err)
	}
	d, err := dockertest.StartWith(dockertest.Options{NetNS: path})
	if err != nil {
		t.Fatalf("dockerd with iptables in a test namespace: %v", err)
	}
	t.Cleanup(d.Stop)
	rules := inNS(t, path, "iptables", "-S", "FORWARD")
	if !strings.Contains(rules, "-j DOCKER-USER") {
		t.Fatalf("dockerd added no FORWARD rules (iptables off?):\n%s", rules)
	}
	if !strings.Contains(rules, "-P FORWARD DROP") {
		t.Logf("dockerd left the FORWARD policy ACCEPT; setting DROP as a daemon on a fresh host does")
		inNS(t, path, "iptables", "-P", "FORWARD", "DROP")
	}
	return d
}

var countRe = regexp.MustCompile(`Count: (\d+)`)

// waitCount waits until the dashboard at url (reached with c) shows a
// count above after, and returns it.
func waitCount(t *testing.T, a *framework.Agent, c *http.Client, url string, after int) int {
	t.Helper()
	var n int
	a.Eventually(60*time.Second, fmt.Sprintf("the dashboard showing a count above %d", after), func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := countRe.FindStringSubmatch(string(body))
		if resp.StatusCode != http.StatusOK || m == nil {
			return false
		}
		n, _ = strconv.Atoi(m[1])
		return n > after
	})
	return n
}

func TestMeshBesideSystemDockerd(t *testing.T) {
	testutil.RequireRoot(t)
	ns := newNetNS(t)
	d := startDockerd(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := framework.ImportDemoImage(ctx, d.Client(t), framework.DemoImage); err != nil {
		t.Fatal(err)
	}
	a := framework.NewAgent(t, framework.Options{NetNS: ns, DockerEndpoint: d.Host})

	port := testutil.FreePort(t)
	r := a.CLI("job", "run", "-var", fmt.Sprintf("dashboard_port=%d", port), "input/mixed.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	a.RunningAllocs("countdash", 2)

	// The dashboard (raw_exec, one allocation) reads count-api (a
	// container, another allocation) through the mesh, and the test
	// reaches the dashboard through its host port on the namespace's
	// 127.0.0.1: both paths pass the DROP policy.
	c := a.HTTPClient()
	defer c.CloseIdleConnections()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	first := waitCount(t, a, c, url, 0)
	waitCount(t, a, c, url, first)

	// The traffic really went through FORWARD: meshlet's CNI-FORWARD
	// rules (the firewall plugin's) accepted packets there.
	counts := inNS(t, ns, "iptables", "-L", "CNI-FORWARD", "-v", "-n", "-x")
	if !acceptedSome(counts) {
		t.Fatalf("no packet accepted by CNI-FORWARD: the test did not exercise FORWARD:\n%s", counts)
	}
}

// acceptedSome reports whether an `iptables -L -v -x` listing has a rule
// with a non-zero packet count.
func acceptedSome(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] != "pkts" {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				return true
			}
		}
	}
	return false
}
