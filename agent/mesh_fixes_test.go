package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/state"
)

// A client-only agent caches the intentions it applied and loads them at
// the next start, so a deny holds before the servers' feed arrives; a
// corrupt cache is ignored; the cache is written only for a new index.
func TestIntentionsCacheRestoresDeny(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	deny := intention.State{Index: 7, Intentions: []intention.Intention{{ID: "3f0c2f5e-0d4c-4a43-9d55-1d4bd0a1c001",
		SourceName: "web", DestinationName: "db", Action: intention.ActionDeny}}}
	a.cacheIntentions(deny)
	path := intentionsCachePath(dir)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("cache not written: %v", err)
	}

	// The next start: an empty default-allow mirror gets the cached deny.
	b := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	ix := intention.NewMirror(nil, true, testLogger())
	b.restoreIntentions(ix)
	if ok, m := ix.Check("web", "db"); ok || m == nil {
		t.Fatalf("web => db allowed (matched %v) after the restart; want the cached deny", m)
	}
	if b.mesh.ixIndex != 7 {
		t.Fatalf("restored index %d, want 7", b.mesh.ixIndex)
	}
	// The same index again is not written; a new one is.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b.cacheIntentions(deny)
	if _, err := os.Stat(path); err == nil {
		t.Fatal("cache rewritten for an unchanged index")
	}
	deny.Index = 8
	b.cacheIntentions(deny)
	if st, err := loadIntentions(path); err != nil || st.Index != 8 {
		t.Fatalf("cache after a new index = %+v, %v; want index 8", st, err)
	}

	// Corrupt: ignored, the mirror keeps the default policy.
	if err := os.WriteFile(path, []byte(`{"Index": 9, "Intentions": [{"SourceName": ""}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	ix2 := intention.NewMirror(nil, true, testLogger())
	c.restoreIntentions(ix2)
	if ok, _ := ix2.Check("web", "db"); !ok || c.mesh.ixIndex != 0 {
		t.Fatalf("a corrupt cache was applied (allowed %v, index %d)", ok, c.mesh.ixIndex)
	}
	// No cache at all: nothing happens.
	d := &Agent{cfg: &Config{DataDir: t.TempDir()}, logger: testLogger(), mesh: &mesh{}}
	d.restoreIntentions(intention.NewMirror(nil, true, testLogger()))
}

// A pre-etcd server data dir that lost connect/ as a whole is refused
// instead of getting a new trust domain.
func TestCheckCAImported(t *testing.T) {
	ctx := context.Background()
	empty := ca.NewDirStorage(t.TempDir())
	legacyDir := func(t *testing.T, stateFile string) string {
		dir := t.TempDir()
		marker := clientstate.MarkerPath(filepath.Join(dir, "client", "state.db"))
		for _, f := range []string{marker, filepath.Join(dir, "server", stateFile)} {
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, f := range []string{"state.db", "state.db" + state.MigratedSuffix} {
		dir := legacyDir(t, f)
		err := checkCAImported(ctx, dir, true, empty)
		if !errors.Is(err, ErrConnectStateLost) || !strings.Contains(err.Error(), filepath.Join(dir, "connect", "ca")) {
			t.Fatalf("%s: err = %v, want ErrConnectStateLost naming connect/ca", f, err)
		}
		if err := checkCAImported(ctx, dir, false, empty); err != nil {
			t.Fatalf("%s: no agent started on it before: %v", f, err)
		}
	}
	// Imported before, or deliberately emptied: allowed.
	for _, d := range []string{"ca" + migratedSuffix, "ca"} {
		dir := legacyDir(t, "state.db"+state.MigratedSuffix)
		if err := os.MkdirAll(filepath.Join(dir, "connect", d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := checkCAImported(ctx, dir, true, empty); err != nil {
			t.Fatalf("with connect/%s: %v", d, err)
		}
	}
	// A data dir since etcd (no bbolt state ever): allowed.
	dir := legacyDir(t, "unrelated")
	if err := checkCAImported(ctx, dir, true, empty); err != nil {
		t.Fatalf("a data dir since etcd: %v", err)
	}
	// The cluster has a CA already: allowed (it is joined).
	withCA := ca.NewDirStorage(filepath.Join(t.TempDir(), "ca"))
	m, err := ca.New(ca.Config{Storage: withCA}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	if err := checkCAImported(ctx, legacyDir(t, "state.db"), true, withCA); err != nil {
		t.Fatalf("the cluster has a CA: %v", err)
	}
}

func TestRootsKey(t *testing.T) {
	r := ca.Roots{ActiveRootID: "r1", Roots: []ca.Root{{ID: "r1"}, {ID: "r0"}}}
	same := ca.Roots{ActiveRootID: "r1", Roots: []ca.Root{{ID: "r0"}, {ID: "r1", Name: "other text"}}}
	if rootsKey(r) != rootsKey(same) {
		t.Fatal("same roots in another order differ")
	}
	for _, other := range []ca.Roots{
		{ActiveRootID: "r0", Roots: r.Roots},
		{ActiveRootID: "r1", Roots: []ca.Root{{ID: "r1"}}},
		{ActiveRootID: "r1", Roots: []ca.Root{{ID: "r1"}, {ID: "r0"}, {ID: "r2"}}},
	} {
		if rootsKey(other) == rootsKey(r) {
			t.Fatalf("%+v taken for unchanged roots", other)
		}
	}
}

func TestRPCRefusalsAreFinal(t *testing.T) {
	for _, err := range []error{rpc.ErrForbidden, rpc.ErrBadRequest} {
		if got := refused(fmt.Errorf("failed to register: %w: no", err)); !errors.Is(got, meshstate.ErrRefused) || !errors.Is(got, err) {
			t.Fatalf("refused(%v) = %v, want ErrRefused wrapping it", err, got)
		}
	}
	for _, err := range []error{nil, rpc.ErrNoServers, rpc.ErrNoLeader, rpc.ErrClosed} {
		if got := refused(err); errors.Is(got, meshstate.ErrRefused) {
			t.Fatalf("refused(%v) = %v: a retryable error taken as final", err, got)
		}
	}
}

// The leader's sweep removes the registrations of nodes the state store
// does not know; the agent's own node stays. AllocChecks of an
// allocation this node does not run is not found.
func TestMeshSweepAndAllocChecks(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.mesh.store.PutAlloc(ctx, "ghost", "a1", []catalog.ServiceInstance{{ID: "g1", Name: "g", NodeID: "ghost", AllocID: "a1"}}); err != nil {
		t.Fatal(err)
	}
	up, err := a.upNodes(ctx)
	if err != nil || !up[a.Client().Node().ID] || up["ghost"] {
		t.Fatalf("upNodes = %v, %v; want this node only", up, err)
	}
	a.sweepMesh(ctx)
	ids, err := a.mesh.store.NodeIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id == "ghost" {
			t.Fatal("an unknown node's registrations survived the sweep")
		}
	}
	if _, err := a.Backend().(*Backend).AllocChecks(ctx, "8d8ae1d6-1111-2222-3333-444455556666"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("AllocChecks(unknown) = %v, want ErrNotFound", err)
	}
}
