package cluster

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHarnessNetwork checks the harness without the cluster features: two
// hosts reach each other and the root namespace over the bridge, and the
// cleanup removes namespaces, veths and bridge and kills processes that
// left their agent's process group.
func TestHarnessNetwork(t *testing.T) {
	bin, _ := binaries(t)
	var (
		bridge     string
		namespaces []string
		escaped    = make(chan struct{})
		escapedPID int
	)
	t.Run("hosts", func(t *testing.T) {
		n := newTestNet(t)
		bridge = n.Bridge
		nsA, nsB := n.AddHost("a", 2), n.AddHost("b", 3)
		namespaces = []string{nsA, nsB}
		url := "http://" + n.Addr(2) + ":9001/"
		app := &agent{t: t, Name: "a", IP: n.Addr(2), NS: nsA, LogPath: filepath.Join(t.TempDir(), "a.log"),
			argv: []string{bin, "demo-app", "counting", "-listen", n.Addr(2) + ":9001"}}
		app.Start()
		t.Cleanup(app.Kill)
		hc := &http.Client{Timeout: 2 * time.Second}
		poll(t, 10*time.Second, "host a from the root namespace", func() (bool, string) {
			app.checkAlive()
			resp, err := hc.Get(url)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
		if out, err := exec.Command("ip", "netns", "exec", nsB, bin, "demo-app", "get", url).CombinedOutput(); err != nil {
			t.Fatalf("host b cannot reach host a: %v\n%s", err, out)
		}
		// A process in its own session, as a task that left the agent's
		// process group: only the namespace cleanup can find it.
		cmd := exec.Command("ip", "netns", "exec", nsB, "setsid", "sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		escapedPID = cmd.Process.Pid
		go func() { _ = cmd.Wait(); close(escaped) }()
	})
	if t.Failed() {
		return
	}
	select {
	case <-escaped:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(escapedPID, syscall.SIGKILL)
		t.Errorf("process %d that left its process group survived the cleanup", escapedPID)
	}
	links, _ := exec.Command("ip", "-o", "link").Output()
	if strings.Contains(string(links), bridge) {
		t.Errorf("cleanup left links of %s:\n%s", bridge, links)
	}
	for _, ns := range namespaces {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			t.Errorf("cleanup left namespace %s", ns)
		}
	}
	routes, _ := exec.Command("ip", "-4", "route").Output()
	if strings.Contains(string(routes), bridge) {
		t.Errorf("cleanup left routes of %s:\n%s", bridge, routes)
	}
}
