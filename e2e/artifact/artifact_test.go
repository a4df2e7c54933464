// Package artifact holds the end-to-end tests of artifact blocks: a task's
// artifact is fetched from a test HTTP server on 127.0.0.1, verified,
// unpacked into its task dir before it starts and not fetched again on a
// restart; a checksum mismatch fails the task with Nomad's event.
package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

// site is a tar.gz holding hello.txt.
func site(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	body := "hello artifact\n"
	if err := tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fileServer serves /site.tar.gz on 127.0.0.1 and counts the requests.
type fileServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func newFileServer(t *testing.T, body []byte) *fileServer {
	s := &fileServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Clone(r.Context()))
		s.mu.Unlock()
		if r.URL.Path != "/site.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Fatalf("test server on %s, want 127.0.0.1", s.URL)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *fileServer) count() (int, []*http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests), append([]*http.Request(nil), s.requests...)
}

// runJob registers a jobspec with -var values; it is purged in t.Cleanup.
func runJob(t *testing.T, a *framework.Agent, id, path string, vars ...string) {
	t.Helper()
	args := []string{"job", "run", "-detach"}
	for _, v := range vars {
		args = append(args, "-var", v)
	}
	t.Cleanup(func() { _ = a.CLI("job", "stop", "-purge", id) })
	if r := a.CLI(append(args, path)...); r.Code != 0 {
		t.Fatalf("meshlet job run %s: exit %d\nstdout: %s\nstderr: %s", path, r.Code, r.Stdout, r.Stderr)
	}
}

// taskState returns the task's state in the job's first allocation.
func taskState(a *framework.Agent, job, task string) (*nomadapi.Allocation, *nomadapi.TaskState) {
	allocs, _, err := a.Nomad().Jobs().Allocations(job, false, nil)
	if err != nil || len(allocs) == 0 {
		return nil, nil
	}
	al, _, err := a.Nomad().Allocations().Info(allocs[0].ID, nil)
	if err != nil || al.TaskStates[task] == nil {
		return nil, nil
	}
	return al, al.TaskStates[task]
}

func events(ts *nomadapi.TaskState) []string {
	var out []string
	for _, e := range ts.Events {
		out = append(out, e.Type)
	}
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

func TestArtifactFetchedUnpackedAndKept(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	body := site(t)
	srv := newFileServer(t, body)
	sum := sha256.Sum256(body)
	runJob(t, a, "artifact", "input/artifact.hcl", "base="+srv.URL, "sum=sha256:"+hex.EncodeToString(sum[:]))
	alloc := a.RunningAllocs("artifact", 1)[0]

	seen := filepath.Join(a.DataDir, "data", "alloc", alloc.ID, "reader", "local", "seen.txt")
	want := "hello artifact\nowned\nhello artifact\nowned\nowned\n"
	var got string
	a.Eventually(60*time.Second, "the task's second run reading its artifact", func() bool {
		b, _ := os.ReadFile(seen)
		got = string(b)
		return got == want
	})
	n, reqs := srv.count()
	if n != 1 {
		t.Errorf("the artifact was requested %d times, want once for the allocation (restarts reuse it)", n)
	}
	if n > 0 && reqs[0].Header.Get("X-Meshlet-Test") != "artifact" {
		t.Errorf("request headers %v lack X-Meshlet-Test", reqs[0].Header)
	}
	_, ts := taskState(a, "artifact", "reader")
	if ts == nil {
		t.Fatal("no task state")
	}
	ev := events(ts)
	if count(ev, "Downloading Artifacts") != 1 || count(ev, "Restarting") != 1 || count(ev, "Started") != 2 {
		t.Errorf("events %v, want one Downloading Artifacts, one Restarting, two Started", ev)
	}
	if i, j := indexOf(ev, "Downloading Artifacts"), indexOf(ev, "Started"); i < 0 || i > j {
		t.Errorf("events %v: artifacts are not downloaded before the task starts", ev)
	}
	t.Logf("task events: %v; local/seen.txt: %q", ev, got)
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func TestArtifactChecksumMismatchFailsTask(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	srv := newFileServer(t, site(t))
	runJob(t, a, "badsum", "input/badsum.hcl", "base="+srv.URL)
	var ts *nomadapi.TaskState
	var al *nomadapi.Allocation
	a.Eventually(60*time.Second, "the task failing on its artifact", func() bool {
		al, ts = taskState(a, "badsum", "reader")
		return ts != nil && ts.State == "dead"
	})
	if !ts.Failed || al.ClientStatus != "failed" {
		t.Errorf("task failed %v, allocation %s; want a failed task and allocation", ts.Failed, al.ClientStatus)
	}
	var failure *nomadapi.TaskEvent
	for _, e := range ts.Events {
		if e.Type == "Started" {
			t.Errorf("the task started despite its artifact's checksum: %v", events(ts))
		}
		if e.Type == "Failed Artifact Download" {
			failure = e
		}
	}
	if failure == nil {
		t.Fatalf("no Failed Artifact Download event in %v", events(ts))
	}
	if !strings.Contains(failure.DisplayMessage, "checksums did not match") ||
		!strings.Contains(failure.DownloadError, srv.URL+"/site.tar.gz") {
		t.Errorf("failure event: message %q, download error %q", failure.DisplayMessage, failure.DownloadError)
	}
	status := a.MustCLI("alloc", "status", al.ID[:8])
	if !strings.Contains(status, "Failed Artifact Download") || !strings.Contains(status, "checksums did not match") {
		t.Errorf("alloc status does not show the artifact failure:\n%s", status)
	}
	t.Logf("failure event: %s", failure.DisplayMessage)
}
