package command

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type cliResult struct {
	code   int
	stdout string
	stderr string
}

// runCLI runs the CLI in-process with captured streams.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	code := runContext(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return cliResult{code, out.String(), errb.String()}
}

// startCLI runs the CLI in a goroutine until it returns or ctx ends.
func startCLI(ctx context.Context, args ...string) (stdout, stderr *syncBuffer, done <-chan int) {
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ch := make(chan int, 1)
	go func() { ch <- runContext(ctx, args, strings.NewReader(""), stdout, stderr) }()
	return stdout, stderr, ch
}

// newAgent serves a fake backend through the real HTTP API on loopback
// and points MESHLET_ADDR at it.
func newAgent(t *testing.T) *apitest.Backend {
	t.Helper()
	fb := apitest.NewBackend()
	srv := httptest.NewServer(api.NewServer(fb, hclog.NewNullLogger()).Handler())
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_ADDR", srv.URL)
	return fb
}

// writeFile writes a file under t.TempDir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("failed to write %s: %v", path, err)
	}
	return path
}

const webJobHCL = `
job "web" {
  datacenters = ["dc1"]

  group "web" {
    count = 2

    task "app" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
    }
  }
}
`

const dockerJobHCL = `
job "dock" {
  group "db" {
    task "redis" {
      driver = "docker"

      config {
        image = "redis:7"
      }
    }
  }
}
`
