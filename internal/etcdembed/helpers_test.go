package etcdembed

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/internal/testutil"
)

// testLogger returns a logger at trace level (so the member's own level
// filter is what is tested) and its buffer.
func testLogger(t *testing.T) (hclog.Logger, *testutil.SyncBuffer) {
	t.Helper()
	b := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", b.String())
		}
	})
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Trace, Output: b}), b
}

// memberConfig is a Dev member on 127.0.0.1 with free ports in its own dir.
func memberConfig(t *testing.T, name string) Config {
	t.Helper()
	lg, _ := testLogger(t)
	return Config{
		DataDir:   filepath.Join(t.TempDir(), "etcd"),
		Name:      name,
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		Logger:    lg,
		Dev:       true,
	}
}

// start starts a member and closes it when the test ends.
func start(t *testing.T, cfg Config) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close(%s): %v", cfg.Name, err)
		}
	})
	return m
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// checkOneLine fails when an error message spans lines.
func checkOneLine(t *testing.T, err error) {
	t.Helper()
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}
