package command

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/internal/testutil"
)

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
func startCLI(ctx context.Context, args ...string) (stdout, stderr *testutil.SyncBuffer, done <-chan int) {
	stdout, stderr = &testutil.SyncBuffer{}, &testutil.SyncBuffer{}
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
