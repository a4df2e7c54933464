package ca

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/testutil"
)

const testClusterID = "0b6f2c8e-0000-4000-8000-000000000001"

// testState is a one-root state of testClusterID at index.
func testState(t *testing.T, index uint64) *StoredState {
	t.Helper()
	r, err := newRootCA(TrustDomainOf(testClusterID), 48*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := encodeKey(r.key)
	if err != nil {
		t.Fatal(err)
	}
	r.Active, r.CreateIndex, r.ModifyIndex = true, index, index
	return &StoredState{ClusterID: testClusterID, Index: index, Roots: []StoredRoot{{Root: r.Root, PrivateKeyPEM: keyPEM}}}
}

// TestDirStorageMarkerFailureIsWarning: the state reached the disk but
// the marker cannot be written: Save succeeds (the state is there) with a
// warning, and writes the marker at a later Save.
func TestDirStorageMarkerFailureIsWarning(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blocker := filepath.Join(dir, MarkerName, "x") // a non-empty directory where the marker goes
	if err := os.MkdirAll(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	s := newDirStorage(dir, hclog.New(&hclog.LoggerOptions{Output: logs}))
	first := testState(t, 1)
	if err := s.Save(ctx, nil, first); err != nil {
		t.Fatalf("Save with an unwritable marker = %v; want success (the state is on disk)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFileName)); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "[WARN]") || !strings.Contains(out, "marker") {
		t.Fatalf("no warning about the marker:\n%s", out)
	}
	if err := os.RemoveAll(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatal(err)
	}
	next := testState(t, 2)
	if err := s.Save(ctx, first, next); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("marker not written at the next Save: %v", err)
	}
	got, err := NewDirStorage(dir).Load(ctx)
	if err != nil || got.Roots[0].ID != next.Roots[0].ID {
		t.Fatalf("Load after the saves = %+v, %v", got, err)
	}
}

// TestLoadDirWritesNothing: LoadDir reads a CA dir as the CA would,
// without creating the dir or writing a marker, and refuses a bad key.
func TestLoadDirWritesNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	if st, err := LoadDir(missing); st != nil || err != nil {
		t.Fatalf("LoadDir of a missing dir = %v, %v", st, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadDir created %s: %v", missing, err)
	}

	dir := t.TempDir()
	m := newTestManager(t, Config{Dir: dir})
	want := m.Roots()
	_ = m.Close()
	if err := os.Remove(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatal(err)
	}
	st, err := LoadDir(dir)
	if err != nil || st == nil || st.ClusterID != m.ClusterID() || len(st.Roots) != 1 || st.Roots[0].ID != want.ActiveRootID {
		t.Fatalf("LoadDir = %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadDir wrote the marker: %v", err)
	}
	viaStorage, err := NewDirStorage(dir).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	viaStorage.Revision = st.Revision
	if !reflect.DeepEqual(viaStorage, st) {
		t.Fatalf("LoadDir and the storage's Load differ:\n%+v\n%+v", st, viaStorage)
	}

	keys, _ := filepath.Glob(filepath.Join(dir, "root-*.key"))
	if err := os.WriteFile(keys[0], []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); !errors.Is(err, ErrStateCorrupt) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("LoadDir with a garbage key = %v, want ErrStateCorrupt naming the dir", err)
	}
	if _, err := New(Config{Dir: dir}, nil, nil); !errors.Is(err, ErrStateCorrupt) || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("New with a garbage key = %v, want ErrStateCorrupt with the recovery", err)
	}
}

// TestCheckStoredState: the checks the CA makes of a state it loads,
// the cross-signed certificate included.
func TestCheckStoredState(t *testing.T) {
	m := newTestManager(t, Config{})
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.RLock()
	good := cloneState(m.stored)
	m.mu.RUnlock()
	if err := CheckStoredState(good); err != nil {
		t.Fatalf("CheckStoredState of a rotated CA = %v", err)
	}
	other := testState(t, 1).Roots[0]
	edits := map[string]func(st *StoredState){
		"no cluster ID":    func(st *StoredState) { st.ClusterID = "" },
		"no active root":   func(st *StoredState) { st.Roots[1].Active = false },
		"two active roots": func(st *StoredState) { st.Roots[0].Active = true },
		"duplicate root":   func(st *StoredState) { st.Roots[0] = st.Roots[1] },
		"garbage cert":     func(st *StoredState) { st.Roots[0].RootCertPEM = "x" },
		"another's key":    func(st *StoredState) { st.Roots[0].PrivateKeyPEM = other.PrivateKeyPEM },
		"garbage cross":    func(st *StoredState) { st.Roots[1].IntermediateCertsPEM = []string{"x"} },
		"cross of another": func(st *StoredState) { st.Roots[1].IntermediateCertsPEM = []string{other.RootCertPEM} },
		"garbage key":      func(st *StoredState) { st.Roots[1].PrivateKeyPEM = "x" },
	}
	for name, edit := range edits {
		st := cloneState(good)
		edit(st)
		if err := CheckStoredState(st); !errors.Is(err, ErrStateCorrupt) {
			t.Errorf("%s: CheckStoredState = %v, want ErrStateCorrupt", name, err)
		}
	}
}
