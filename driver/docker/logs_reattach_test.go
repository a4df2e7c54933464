package docker

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
)

// fakeLogsDaemon is the part of Docker's API the log copier uses: its
// first logs stream ends cleanly (dockerd closing its followers, as in a
// restart with live-restore) and its first inspect fails; the container
// keeps running.
type fakeLogsDaemon struct {
	logCalls, inspectCalls atomic.Int32
	t0                     time.Time
}

func (f *fakeLogsDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Api-Version", "1.41")
	switch {
	case strings.HasSuffix(r.URL.Path, "/_ping"):
		_, _ = w.Write([]byte("OK"))
	case strings.HasSuffix(r.URL.Path, "/containers/abc/logs"):
		n := f.logCalls.Add(1)
		var b bytes.Buffer
		frame(&b, streamStdout, f.t0, "first\n")
		if n >= 2 {
			frame(&b, streamStdout, f.t0.Add(time.Second), "second\n")
		}
		w.Header().Set("Content-Type", "application/vnd.docker.raw-stream")
		_, _ = w.Write(b.Bytes())
		if n >= 3 {
			w.(http.Flusher).Flush()
			<-r.Context().Done() // followed until the copier stops
		}
	case strings.HasSuffix(r.URL.Path, "/containers/abc/json"):
		if f.inspectCalls.Add(1) == 1 {
			http.Error(w, `{"message":"daemon restarting"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"Id":"abc","State":{"Running":true,"Status":"running"}}`))
	default:
		http.NotFound(w, r)
	}
}

// TestLogsReattachWhenStateUnknown: a log stream that ends cleanly while
// the daemon cannot say whether the container stopped is followed again,
// not given up for good (the container's later output would never reach
// the task's logs).
func TestLogsReattachWhenStateUnknown(t *testing.T) {
	fake := &fakeLogsDaemon{t0: time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	d := New(Config{Endpoint: "tcp://" + strings.TrimPrefix(srv.URL, "http://"), StateDir: t.TempDir(),
		Dangling: DanglingConfig{Enabled: new(bool)}}, hclog.NewNullLogger())
	defer d.Close()
	dir := t.TempDir()
	cfg := &driver.TaskConfig{ID: "a/t/1", AllocID: "a", Name: "t",
		StdoutPath: filepath.Join(dir, "t.stdout"), StderrPath: filepath.Join(dir, "t.stderr")}
	ctx, cancel := context.WithCancel(context.Background())
	h := newHandle(cfg, &driverState{ContainerID: "abc", CursorFile: filepath.Join(dir, "cursor")}, cancel)
	go d.copyLogs(ctx, h)
	defer func() { cancel(); <-h.logsDone }()
	testutil.WaitFor(t, 10*time.Second, "the copier following the container again", func() bool { return fake.logCalls.Load() >= 3 })
	select {
	case <-h.logsDone:
		t.Fatal("the log copier stopped although the container still runs")
	default:
	}
	out, err := os.ReadFile(cfg.StdoutPath + ".0")
	if err != nil || string(out) != "first\nsecond\n" {
		t.Fatalf("stdout = %q, %v; want first and second once each", out, err)
	}
}
