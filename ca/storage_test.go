package ca

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/testutil"
)

// casStorage is a Storage in memory with real compare-and-swap on a
// revision, storing the JSON encoding like the etcd storage does.
type casStorage struct {
	mu    sync.Mutex
	data  []byte
	rev   int64
	saves int // successful

	// The first gateLoads Loads call loadGate.Done and wait for it after
	// reading (to line up racing starts).
	loadGate  *sync.WaitGroup
	gateLoads int

	// beforeSave, if set (before the storage is used), runs first in
	// Save, without s.mu; its error is Save's.
	beforeSave func(prev, next *StoredState) error
}

func (s *casStorage) Load(ctx context.Context) (*StoredState, error) {
	s.mu.Lock()
	data, rev := s.data, s.rev
	var gate *sync.WaitGroup
	if s.gateLoads > 0 {
		s.gateLoads--
		gate = s.loadGate
	}
	s.mu.Unlock()
	if gate != nil {
		gate.Done()
		gate.Wait()
	}
	if data == nil {
		return nil, nil
	}
	var st StoredState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	st.Revision = rev
	return &st, nil
}

func (s *casStorage) Save(ctx context.Context, prev, next *StoredState) error {
	if s.beforeSave != nil {
		if err := s.beforeSave(prev, next); err != nil {
			return err
		}
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if (prev == nil) != (s.data == nil) || prev != nil && prev.Revision != s.rev {
		return ErrStateConflict
	}
	s.data = b
	s.rev++
	s.saves++
	next.Revision = s.rev
	return nil
}

func (s *casStorage) saveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

func (s *casStorage) load(t *testing.T) *StoredState {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil || st == nil {
		t.Fatalf("Load = %v, %v", st, err)
	}
	return st
}

func sameRoots(t *testing.T, a, b *Manager) {
	t.Helper()
	ra, rb := a.Roots(), b.Roots()
	if ra.ActiveRootID != rb.ActiveRootID || ra.TrustDomain != rb.TrustDomain || len(ra.Roots) != len(rb.Roots) {
		t.Fatalf("roots differ:\n%+v\n%+v", ra, rb)
	}
	for i := range ra.Roots {
		if ra.Roots[i].RootCertPEM != rb.Roots[i].RootCertPEM {
			t.Fatalf("root %d differs", i)
		}
	}
}

func TestDirStorageRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ca")
	s := NewDirStorage(dir)
	if st, err := s.Load(ctx); st != nil || err != nil {
		t.Fatalf("Load of a new dir = %v, %v; want nothing", st, err)
	}
	mk := func(index uint64) StoredRoot {
		r, err := newRootCA("0b6f2c8e-0000-4000-8000-000000000001.meshlet", 48*time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, err := encodeKey(r.key)
		if err != nil {
			t.Fatal(err)
		}
		r.Active, r.CreateIndex, r.ModifyIndex = true, index, index
		return StoredRoot{Root: r.Root, PrivateKeyPEM: keyPEM}
	}
	first := &StoredState{ClusterID: "0b6f2c8e-0000-4000-8000-000000000001", Index: 1, Roots: []StoredRoot{mk(1)}}
	if err := s.Save(ctx, nil, first); err != nil {
		t.Fatal(err)
	}
	if first.Revision == 0 {
		t.Fatal("Save did not set the revision")
	}
	if err := s.Save(ctx, nil, first); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("second first save = %v, want ErrStateConflict", err)
	}
	loaded, err := NewDirStorage(dir).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	loaded.Revision = first.Revision
	if !reflect.DeepEqual(loaded, first) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", loaded, first)
	}
	oldKey := filepath.Join(dir, keyFileName(first.Roots[0].Root))
	if fi, err := os.Stat(oldKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v %v", oldKey, fi, err)
	}

	// Replace the root: the old key file goes, the new one comes.
	next := &StoredState{ClusterID: first.ClusterID, Index: 2, Roots: []StoredRoot{mk(2)}}
	stale := *first
	stale.Revision--
	if err := s.Save(ctx, &stale, next); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("save on a stale revision = %v, want ErrStateConflict", err)
	}
	if err := s.Save(ctx, first, next); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(oldKey); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("key of the dropped root still there: %v", err)
	}
	m := newTestManager(t, Config{Storage: NewDirStorage(dir)})
	if m.ClusterID() != first.ClusterID || m.Roots().ActiveRootID != next.Roots[0].ID {
		t.Fatalf("manager over the dir storage loaded %s / %s", m.ClusterID(), m.Roots().ActiveRootID)
	}
	_ = m.Close()

	// Refusals: a dir that held a CA never looks new.
	path := filepath.Join(dir, stateFileName)
	good, _ := os.ReadFile(path)
	if err := os.WriteFile(path, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := NewDirStorage(dir).Load(ctx); st != nil || !errors.Is(err, ErrStateCorrupt) {
		t.Fatalf("Load of a truncated state = %v, %v; want ErrStateCorrupt", st, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if st, err := NewDirStorage(dir).Load(ctx); st != nil || !errors.Is(err, ErrStateMissing) {
		t.Fatalf("Load of a deleted state = %v, %v; want ErrStateMissing", st, err)
	}
	if _, err := New(Config{Storage: NewDirStorage(dir)}, nil, nil); !errors.Is(err, ErrStateMissing) {
		t.Fatalf("New over a dir that lost its state = %v, want ErrStateMissing", err)
	}
}

func TestConfigModesExclusive(t *testing.T) {
	signer := signerFunc(func(context.Context, string, string) (SignedCert, error) { return SignedCert{}, nil })
	for name, cfg := range map[string]Config{
		"signer and dir":     {Signer: signer, Dir: t.TempDir()},
		"signer and storage": {Signer: signer, Storage: &casStorage{}},
		"dir and storage":    {Dir: t.TempDir(), Storage: &casStorage{}},
	} {
		if _, err := New(cfg, nil, nil); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestSharedStorage: two managers over one storage are one CA; a rotation
// on one reaches the other through Reload; a stale write conflicts.
func TestSharedStorage(t *testing.T) {
	ctx := context.Background()
	st := &casStorage{}
	m1 := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour})
	m2 := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour})
	if m1.ClusterID() != m2.ClusterID() || m1.TrustDomain() != m2.TrustDomain() {
		t.Fatalf("cluster IDs differ: %s %s", m1.ClusterID(), m2.ClusterID())
	}
	sameRoots(t, m1, m2)
	if svc, err := m2.VerifyPeer([][]byte{parseLeafChain(t, mustLeaf(t, m1, "web"))[0].Raw}); err != nil || svc != "web" {
		t.Fatalf("m2.VerifyPeer(m1 leaf) = %q, %v", svc, err)
	}
	old := mustLeaf(t, m2, "api")

	var rootsChanged atomic.Int32
	defer m2.Subscribe(func(ev Event) {
		if ev.Kind == EventRootsChanged {
			rootsChanged.Add(1)
		}
	})()
	if err := m2.Reload(ctx); err != nil || rootsChanged.Load() != 0 {
		t.Fatalf("Reload without a change = %v, %d events", err, rootsChanged.Load())
	}
	if err := m1.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if rootsChanged.Load() != 1 {
		t.Fatalf("%d EventRootsChanged after Reload, want 1", rootsChanged.Load())
	}
	sameRoots(t, m1, m2)
	newSigner := activeSigner(m1)
	testutil.WaitFor(t, 10*time.Second, "m2 re-issues its leaf under the new root", func() bool {
		l, err := m2.Leaf(ctx, "api")
		return err == nil && signerOf(t, l) == newSigner && l.SerialNumber != old.SerialNumber
	})
	newLeaf := parseLeafChain(t, mustLeaf(t, m2, "api"))
	if svc, err := m1.VerifyPeer([][]byte{newLeaf[0].Raw}); err != nil || svc != "api" {
		t.Fatalf("m1.VerifyPeer(m2's new leaf, no intermediate) = %q, %v", svc, err)
	}

	// m1 rotates again; m2 has not reloaded: its rotation conflicts,
	// fails and leaves m2 on the stored state.
	if err := m1.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	saves := st.saveCount()
	if err := m2.Rotate(ctx); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("rotation on a stale state = %v, want ErrStateConflict", err)
	}
	if st.saveCount() != saves {
		t.Fatal("a conflicting rotation was stored")
	}
	sameRoots(t, m1, m2)
	if n := rootsChanged.Load(); n != 2 {
		t.Fatalf("%d EventRootsChanged after the conflict's reload, want 2", n)
	}
	if err := m2.Rotate(ctx); err != nil {
		t.Fatalf("rotation after the reload: %v", err)
	}
	if got := len(st.load(t).Roots); got != 4 {
		t.Fatalf("stored %d roots, want 4", got)
	}
}

// TestRacingNewOnEmptyStorage: two servers start at once on an empty
// storage; one creates the CA and the other adopts it.
func TestRacingNewOnEmptyStorage(t *testing.T) {
	var gate sync.WaitGroup
	gate.Add(2)
	st := &casStorage{loadGate: &gate, gateLoads: 2}
	var ms [2]*Manager
	var errs [2]error
	var wg sync.WaitGroup
	for i := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i], errs[i] = New(Config{Storage: st}, hclog.NewNullLogger(), nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("New %d: %v", i, err)
		}
		t.Cleanup(func() { _ = ms[i].Close() })
	}
	if n := st.saveCount(); n != 1 {
		t.Fatalf("%d saves, want 1 (the loser adopts the winner's state)", n)
	}
	if ms[0].ClusterID() != ms[1].ClusterID() {
		t.Fatalf("cluster IDs differ: %s %s", ms[0].ClusterID(), ms[1].ClusterID())
	}
	sameRoots(t, ms[0], ms[1])
	if stored := st.load(t); stored.ClusterID != ms[0].ClusterID() || len(stored.Roots) != 1 {
		t.Fatalf("stored %+v", stored)
	}
}

// TestPruneReachesOtherServer: a root dropped by one server disappears
// from the other at its Reload.
func TestPruneReachesOtherServer(t *testing.T) {
	ctx := context.Background()
	st := &casStorage{}
	m1 := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: time.Nanosecond})
	m2 := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: time.Hour})
	if err := m1.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "m1 drops the old root", func() bool {
		return len(st.load(t).Roots) == 1
	})
	if err := m2.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	sameRoots(t, m1, m2)
	if r := m2.Roots().Roots[0]; len(r.IntermediateCertsPEM) != 0 {
		t.Fatal("cross-signed certificate of a dropped root kept")
	}
}
