package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A dev agent's temporary data dir must be traversable by tasks that run
// as another user (user = "nobody"): MkdirTemp alone makes it 0700.
func TestDevDataDirTraversable(t *testing.T) {
	a := &Agent{cfg: &Config{Dev: true}}
	if err := a.prepareDataDir(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(a.cfg.DataDir) })
	fi, err := os.Stat(a.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Fatalf("dev data dir %s has mode %v, want 0755", a.cfg.DataDir, fi.Mode().Perm())
	}
	if !a.tempData {
		t.Error("dev data dir not marked temporary")
	}
}

// Losing connect/ as a whole (not one file in it) after an agent ran on
// the data dir is refused: a fresh CA would be a new trust domain. A data
// dir no agent ever got through is not taken for a lost one.
func TestLostConnectDirRefused(t *testing.T) {
	dir := t.TempDir()
	if err := checkConnectState(dir, startedBefore(dir)); err != nil {
		t.Fatalf("fresh data dir: %v", err)
	}
	a := startAgent(t, dir)
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if !startedBefore(dir) {
		t.Fatal("a completed start left no client marker")
	}
	if err := checkConnectState(dir, true); err != nil {
		t.Fatalf("intact data dir refused: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "connect")); err != nil {
		t.Fatal(err)
	}
	cfg := a.Config()
	b, err := New(&cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start()
	if err == nil {
		_ = b.Shutdown()
		t.Fatal("agent started with connect/ gone")
	}
	if !errors.Is(err, ErrConnectStateLost) || !strings.Contains(err.Error(), filepath.Join(dir, "connect", "ca")) {
		t.Fatalf("err = %v, want ErrConnectStateLost naming connect/ca", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "connect")); err == nil {
		t.Error("the refused start created connect/ again")
	}
}

// connect { max_api_leaves } reaches the CA: leaves minted for API callers
// only are capped at it.
func TestAPILeafCapFromConfig(t *testing.T) {
	a := startAgentWith(t, t.TempDir(), func(cfg *Config) { cfg.Connect.MaxAPILeaves = 2 })
	t.Cleanup(func() { _ = a.Shutdown() })
	ca := a.ControlPlane().CA
	for _, svc := range []string{"a", "b", "c", "d"} {
		if _, err := ca.Leaf(context.Background(), svc); err != nil {
			t.Fatalf("leaf %s: %v", svc, err)
		}
	}
	if n := ca.LeafStats().Cached; n != 2 {
		t.Fatalf("%d API-only leaves cached, want the configured cap 2", n)
	}
}
