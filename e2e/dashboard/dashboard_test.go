// Package dashboard holds the end-to-end test of the two-group dashboard
// job: the api reachable only through the mesh, the dashboard published on
// a static host port and reached from the host through 127.0.0.1.
package dashboard

import (
	"fmt"
	"github.com/meshlet/meshlet/internal/testutil"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

func TestDashboardThroughStaticPort(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	port := freePort(t)
	r := a.CLI("job", "run", "-var", fmt.Sprintf("dashboard_port=%d", port), "input/countdash.hcl")
	if r.Code != 0 {
		t.Fatalf("job run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Cleanup(func() { a.CLI("job", "stop", "-purge", "countdash") })
	a.RunningAllocs("countdash", 2)

	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	count := regexp.MustCompile(`Count: (\d+)`)
	var last int
	var seen string // what the dashboard last answered, for the failure message
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last dashboard answer: %s", seen)
		}
	})
	a.Eventually(30*time.Second, "the dashboard showing a count from the api", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			seen = err.Error()
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		seen = fmt.Sprintf("%s %s", resp.Status, body)
		m := count.FindSubmatch(body)
		if resp.StatusCode != http.StatusOK || m == nil {
			return false
		}
		last, _ = strconv.Atoi(string(m[1]))
		return true
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := count.FindSubmatch(body)
	if m == nil {
		t.Fatalf("second dashboard answer has no count: %s", body)
	}
	if n, _ := strconv.Atoi(string(m[1])); n <= last {
		t.Fatalf("counter did not advance: %d then %d", last, n)
	}

	// The api itself is not published: its allocation has no host port.
	status := a.MustCLI("job", "status", "countdash")
	if !regexp.MustCompile(`api`).MatchString(status) {
		t.Errorf("job status does not list the api group:\n%s", status)
	}
}

func freePort(t *testing.T) int { return testutil.FreePort(t) }
