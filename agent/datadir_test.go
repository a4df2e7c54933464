package agent

import (
	"os"
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
