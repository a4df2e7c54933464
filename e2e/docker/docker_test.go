// Package docker holds the end-to-end tests of the docker driver through
// the real agent: countdash with both apps as containers behind built-in
// sidecars, alloc exec and alloc logs on a container, an agent SIGKILL with
// containers running, a missing image, and the sidecars as Envoy
// containers (forced by the servers, or chosen by the node's connect_proxy
// driver where the stand-in image is present). A private dockerd
// (driver/docker/dockertest: --iptables=false --bridge=none, its own data
// root) runs for the package; the demo image is built locally and imported
// (no registry is contacted). The tests need root and dockerd, and skip
// saying so otherwise.
package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

var daemon *dockertest.Daemon

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m, &daemon)) }

// newAgent starts an agent whose docker driver talks to the private
// dockerd, with the demo image imported.
func newAgent(t *testing.T, opts framework.Options) *framework.Agent {
	t.Helper()
	testutil.RequireRoot(t)
	daemon.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := framework.ImportDemoImage(ctx, daemon.Client(t), framework.DemoImage); err != nil {
		t.Fatal(err)
	}
	opts.DockerEndpoint = daemon.Host
	return framework.NewAgent(t, opts)
}

var countRe = regexp.MustCompile(`Count: (\d+)`)

// dashboard GETs the dashboard and returns its status and body.
func dashboard(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitCount waits until the dashboard shows a count greater than after
// and returns it.
func waitCount(t *testing.T, a *framework.Agent, url string, after int) int {
	t.Helper()
	var n int
	var seen string
	a.Eventually(45*time.Second, fmt.Sprintf("the dashboard showing a count above %d", after), func() bool {
		code, body, err := dashboard(url)
		seen = fmt.Sprintf("%d %s %v", code, body, err)
		m := countRe.FindStringSubmatch(body)
		if code != http.StatusOK || m == nil {
			return false
		}
		n, _ = strconv.Atoi(m[1])
		return n > after
	})
	t.Logf("dashboard: count %d (%.60q)", n, seen)
	return n
}

// taskContainers lists the containers of allocID's tasks (not its pause
// container) as "task=<id>/<state>" sorted.
func taskContainers(t *testing.T, allocID string) []string {
	return containersLabelled(t, docker.LabelAllocID+"="+allocID)
}

// containersLabelled lists the task containers with label (key=value).
func containersLabelled(t *testing.T, label string) []string {
	t.Helper()
	list, err := daemon.Client(t).ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		t.Fatalf("container list: %v", err)
	}
	var out []string
	for _, c := range list {
		if task := c.Labels[docker.LabelTask]; task != "" {
			out = append(out, task+"="+c.ID[:12]+"/"+c.State)
		}
	}
	sort.Strings(out)
	return out
}

func TestCountdashContainers(t *testing.T) {
	a := newAgent(t, framework.Options{DefaultDeny: true})
	port := testutil.FreePort(t)
	r := a.CLI("job", "run", "-var", fmt.Sprintf("dashboard_port=%d", port), "input/countdash.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	allocs := a.RunningAllocs("countdash", 2)
	api, dash := a.AllocByGroup(allocs, "api"), a.AllocByGroup(allocs, "dashboard")
	for _, al := range []struct{ id, task string }{{api.ID, "web"}, {dash.ID, "dashboard"}} {
		got := taskContainers(t, al.id)
		if len(got) != 1 || !strings.HasPrefix(got[0], al.task+"=") || !strings.HasSuffix(got[0], "/running") {
			t.Fatalf("alloc %s: want one running container of task %s, got %v", al.id, al.task, got)
		}
	}

	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	// Default deny: the dashboard answers, but its upstream is refused.
	a.Eventually(30*time.Second, "the dashboard answering 502 while intentions deny", func() bool {
		code, _, _ := dashboard(url)
		return code == http.StatusBadGateway
	})
	a.MustCLI("intention", "create", "count-dashboard", "count-api")
	first := waitCount(t, a, url, 0)
	second := waitCount(t, a, url, first)
	checkPlaintextRefused(t, a, api.ID)

	t.Run("exec", func(t *testing.T) { checkExec(t, a, api.ID) })
	t.Run("logs", func(t *testing.T) { checkLogs(t, a, api.ID, 1) })
	t.Run("agent killed and restarted", func(t *testing.T) {
		before := map[string][]string{api.ID: taskContainers(t, api.ID), dash.ID: taskContainers(t, dash.ID)}
		a.Kill()
		// The containers belong to dockerd: the mesh keeps working
		// with the agent down (the sidecars run on).
		third := waitCount(t, a, url, second)
		a.Restart()
		a.Eventually(30*time.Second, "the allocations running again after the restart", func() bool {
			return len(a.RunningAllocs("countdash", 2)) == 2
		})
		// Give recovery time to (wrongly) start a second container.
		time.Sleep(5 * time.Second)
		for id, want := range before {
			if got := taskContainers(t, id); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("alloc %s: containers %v after the restart, want the same %v", id, got, want)
			}
		}
		waitCount(t, a, url, third)
		checkLogs(t, a, api.ID, 1)
		checkExec(t, a, api.ID)
	})
}

// checkPlaintextRefused: count-api's only way in, its sidecar's public
// listener (published on 127.0.0.1), speaks mTLS only, so a plaintext
// request gets no count.
func checkPlaintextRefused(t *testing.T, a *framework.Agent, allocID string) {
	t.Helper()
	alloc, _, err := a.Nomad().Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := 0
	for _, p := range alloc.AllocatedResources.Shared.Ports {
		if p.Label == "connect-proxy-count-api" {
			port = p.Value
		}
	}
	if port == 0 {
		t.Fatalf("alloc %s has no connect-proxy-count-api port: %+v", allocID, alloc.AllocatedResources.Shared.Ports)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("the sidecar's public listener %s does not answer: %v", addr, err)
	}
	conn.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `"count"`) {
			t.Fatalf("plaintext request to the sidecar's public listener got the count: %s", body)
		}
	}
}

// checkExec runs the image's own binary inside the api container through
// `meshlet alloc exec`: it reaches the counter on the loopback of the
// allocation's namespace, which only a process inside it can.
func checkExec(t *testing.T, a *framework.Agent, allocID string) {
	t.Helper()
	r := a.Exec(allocID, "web", framework.DemoAppPath, "get", "http://127.0.0.1:9001/")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"count"`) {
		t.Fatalf("alloc exec get: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	r = a.Exec(allocID, "web", "/no-such-binary")
	if r.Code == 0 {
		t.Fatalf("alloc exec of a missing binary succeeded: %s", r.Stdout)
	}
}

// checkLogs reads the api container's stdout through `meshlet alloc logs`
// and in its log file: the counter's start line appears exactly want
// times.
func checkLogs(t *testing.T, a *framework.Agent, allocID string, want int) {
	t.Helper()
	var out string
	a.Eventually(15*time.Second, "the counter's start line in alloc logs", func() bool {
		out = a.CLI("alloc", "logs", allocID, "web").Stdout
		return strings.Contains(out, "listening on 127.0.0.1:9001")
	})
	if n := strings.Count(out, "listening on 127.0.0.1:9001"); n != want {
		t.Fatalf("alloc logs: the start line appears %d times, want %d:\n%s", n, want, out)
	}
	// The rotated file on disk, which the driver appends to from its
	// cursor after a restart.
	path := filepath.Join(a.DataDir, "data", "alloc", allocID, "alloc", "logs", "web.stdout.0")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(body), "listening on 127.0.0.1:9001"); n != want {
		t.Fatalf("%s: the start line appears %d times, want %d:\n%s", path, n, want, body)
	}
}

// A missing image fails the task with an event naming the pull, within
// image_pull_timeout, without restarts or containers left: the registry
// refuses the connection (fails at once), or accepts it and never answers
// (image_pull_timeout ends the pull).
func TestMissingImageFailsTask(t *testing.T) {
	a := newAgent(t, framework.Options{})
	t.Run("connection refused", func(t *testing.T) {
		image := "127.0.0.1:1/meshlet-e2e/missing:latest"
		_ = checkPullFails(t, a, image, "20s", 0, 20*time.Second)
	})
	t.Run("registry never answers", func(t *testing.T) {
		image := silentRegistry(t) + "/meshlet-e2e/missing:latest"
		joined := checkPullFails(t, a, image, "3s", 3*time.Second, 20*time.Second)
		if !strings.Contains(joined, "not pulled within image_pull_timeout (3s)") {
			t.Errorf("the event does not name image_pull_timeout:\n%s", joined)
		}
	})
}

// silentRegistry listens on 127.0.0.1, accepts connections and never
// answers; it returns host:port.
func silentRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// checkPullFails runs missing.hcl with image and pull_timeout and checks
// the task fails, naming the pull, after at least min and within max; it
// returns the task's events.
func checkPullFails(t *testing.T, a *framework.Agent, image, timeout string, min, max time.Duration) string {
	t.Helper()
	start := time.Now()
	r := a.CLI("job", "run", "-var", "image="+image, "-var", "pull_timeout="+timeout, "input/missing.hcl")
	defer a.CLI("job", "stop", "-purge", "missing")
	// job run monitors the deployment: it fails, naming the pull.
	if r.Code == 0 || !strings.Contains(r.Stdout, `task "t": Driver Failure: `) || !strings.Contains(r.Stdout, "failed to pull image") {
		t.Fatalf("job run: exit %d, want a failure naming the pull\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	var events []string
	a.Eventually(60*time.Second, "the task failing on its missing image", func() bool {
		allocs, _, err := a.Nomad().Jobs().Allocations("missing", false, nil)
		if err != nil || len(allocs) == 0 {
			return false
		}
		ts := allocs[0].TaskStates["t"]
		if ts == nil {
			return false
		}
		events = events[:0]
		for _, e := range ts.Events {
			events = append(events, e.Type+": "+e.DisplayMessage)
		}
		return ts.Failed && ts.State == "dead"
	})
	took := time.Since(start)
	joined := strings.Join(events, "\n")
	t.Logf("failed after %s; events:\n%s", took.Round(time.Millisecond), joined)
	if !strings.Contains(joined, "failed to pull image "+image) {
		t.Fatalf("no event names the failed pull of %s:\n%s", image, joined)
	}
	if took < min || took > max {
		t.Errorf("the task took %s to fail, want between %s and %s", took, min, max)
	}
	if got := containersLabelled(t, docker.LabelJob+"=missing"); len(got) != 0 {
		t.Errorf("containers left: %v", got)
	}
	return joined
}
