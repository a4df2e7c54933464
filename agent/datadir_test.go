package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
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

// A data dir of an agent from before the cluster keeps its CA and
// intentions in connect/: the first start imports them into etcd (same
// trust domain, same intentions) and renames the directories; later starts
// read etcd. Losing connect/ca of such a data dir before the import is
// refused: a fresh CA would be a new trust domain.
func TestConnectStateImportedIntoEtcd(t *testing.T) {
	dir := t.TempDir()
	caDir, ixDir := filepath.Join(dir, "connect", "ca"), filepath.Join(dir, "connect", "intentions")
	old, err := ca.New(ca.Config{Dir: caDir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	td := old.TrustDomain()
	_ = old.Close()
	ix, err := intention.New(ixDir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: intention.ActionDeny}, false); err != nil {
		t.Fatal(err)
	}

	for start := 1; start <= 2; start++ {
		a := startAgent(t, dir)
		cp := a.ControlPlane()
		if got := cp.CA.TrustDomain(); got != td {
			t.Errorf("start %d: trust domain %s, want the imported %s", start, got, td)
		}
		if ok, m := cp.Intentions.Check("web", "db"); ok || m == nil {
			t.Errorf("start %d: web => db allowed (matched %v), want the imported deny", start, m)
		}
		if err := a.Shutdown(); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{caDir, ixDir} {
			if _, err := os.Stat(d + migratedSuffix); err != nil {
				t.Errorf("start %d: %s not kept as %s: %v", start, d, d+migratedSuffix, err)
			}
		}
	}

	// A pre-etcd data dir that lost connect/ca is refused before the import.
	legacy := t.TempDir()
	if err := os.MkdirAll(filepath.Join(legacy, "connect", "intentions"), 0o700); err != nil {
		t.Fatal(err)
	}
	err = checkConnectState(legacy, true)
	if !errors.Is(err, ErrConnectStateLost) || !strings.Contains(err.Error(), filepath.Join(legacy, "connect", "ca")) {
		t.Fatalf("err = %v, want ErrConnectStateLost naming connect/ca", err)
	}
	if err := checkConnectState(legacy, false); err != nil {
		t.Fatalf("a data dir no agent started on: %v", err)
	}
}

// A server whose data dir holds a CA of another trust domain than the
// cluster's is refused, naming the directory: importing it would split
// the mesh.
func TestImportRefusesForeignCA(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir)
	td := a.ControlPlane().CA.TrustDomain()
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(dir, "connect", "ca")
	other, err := ca.New(ca.Config{Dir: caDir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	if _, err := intention.New(filepath.Join(dir, "connect", "intentions"), true, nil); err != nil {
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
		t.Fatal("started with a foreign CA in connect/ca")
	}
	if !errors.Is(err, ErrConnectStateConflict) || !strings.Contains(err.Error(), caDir) || !strings.Contains(err.Error(), strings.TrimSuffix(td, ".meshlet")) {
		t.Fatalf("err = %v, want ErrConnectStateConflict naming %s and the cluster's CA", err, caDir)
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
