package meshstate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/ca"
)

// newRoot is a root with a real self-signed certificate and EC key.
func newRoot(t testing.TB, id string, active bool) ca.StoredRoot {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "root " + id},
		NotBefore: testNow, NotAfter: testNow.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.StoredRoot{
		Root: ca.Root{ID: id, Name: "root " + id, SerialNumber: 7, NotBefore: testNow, NotAfter: testNow.Add(24 * time.Hour),
			RootCertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), Active: active,
			CreateIndex: 1, ModifyIndex: 1},
		PrivateKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
	}
}

// sameState compares two states but their revisions.
func sameState(a, b *ca.StoredState) bool {
	x, y := *a, *b
	x.Revision, y.Revision = 0, 0
	return reflect.DeepEqual(x, y)
}

func TestCAStorageRoundTrip(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	cs := openTest(t, c, prefix).CAStorage()
	ctx := ctxT(t, 20*time.Second)
	if st, err := cs.Load(ctx); st != nil || err != nil {
		t.Fatalf("Load of nothing = %+v, %v; want nil, nil", st, err)
	}
	r1, r2 := newRoot(t, "r1", true), newRoot(t, "r2", true)
	s1 := &ca.StoredState{ClusterID: "c1", Index: 1, Roots: []ca.StoredRoot{r1}}
	if err := cs.Save(ctx, nil, s1); err != nil || s1.Revision == 0 {
		t.Fatalf("Save(nil) = %v, revision %d", err, s1.Revision)
	}
	got, err := cs.Load(ctx)
	if err != nil || !sameState(got, s1) || got.Revision != s1.Revision {
		t.Fatalf("Load = %+v, %v\nwant %+v", got, err, s1)
	}
	resp, err := c.Get(ctx, prefix+"ca/roots")
	if err != nil || strings.Contains(string(resp.Kvs[0].Value), "PRIVATE KEY") {
		t.Fatalf("ca/roots holds key material (%v): %s", err, resp.Kvs[0].Value)
	}

	// A rotation: r1 is rotated out, r2 is new.
	old := r1
	old.Active, old.RotatedOutAt = false, testNow.Add(time.Hour)
	s2 := &ca.StoredState{ClusterID: "c1", Index: 2, Roots: []ca.StoredRoot{old, r2}}
	if err := cs.Save(ctx, got, s2); err != nil || s2.Revision <= s1.Revision {
		t.Fatalf("Save(rotation) = %v, revision %d", err, s2.Revision)
	}
	if n := countKeys(t, c, prefix, "ca/keys/"); n != 2 {
		t.Fatalf("%d keys stored, want 2", n)
	}
	// A save based on the state before the rotation loses.
	s3 := &ca.StoredState{ClusterID: "c1", Index: 2, Roots: []ca.StoredRoot{r1, newRoot(t, "r3", false)}}
	if err := cs.Save(ctx, s1, s3); !errors.Is(err, ca.ErrStateConflict) {
		t.Fatalf("Save(stale prev) = %v, want ErrStateConflict", err)
	}
	if err := cs.Save(ctx, nil, s3); !errors.Is(err, ca.ErrStateConflict) {
		t.Fatalf("Save(nil) over a stored state = %v, want ErrStateConflict", err)
	}
	if n := countKeys(t, c, prefix, "ca/keys/"); n != 2 {
		t.Fatalf("a failed save changed the keys: %d", n)
	}
	// Pruning r1 deletes its key.
	s4 := &ca.StoredState{ClusterID: "c1", Index: 3, Roots: []ca.StoredRoot{r2}}
	if err := cs.Save(ctx, s2, s4); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, c, prefix, "ca/keys/r1"); n != 0 {
		t.Fatal("the key of a pruned root is still stored")
	}
	if got, err := cs.Load(ctx); err != nil || !sameState(got, s4) || got.Revision != s4.Revision {
		t.Fatalf("Load = %+v, %v\nwant %+v", got, err, s4)
	}
}

// TestCAStorageCreateRace: two servers creating the CA at once; one wins.
func TestCAStorageCreateRace(t *testing.T) {
	prefix := testPrefix(t)
	a, b := openTest(t, newClient(t), prefix).CAStorage(), openTest(t, newClient(t), prefix).CAStorage()
	ctx := ctxT(t, 20*time.Second)
	states := []*ca.StoredState{
		{ClusterID: "ca", Index: 1, Roots: []ca.StoredRoot{newRoot(t, "ra", true)}},
		{ClusterID: "cb", Index: 1, Roots: []ca.StoredRoot{newRoot(t, "rb", true)}},
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, cs := range []ca.Storage{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cs.Save(ctx, nil, states[i])
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			won = i
		case !errors.Is(err, ca.ErrStateConflict):
			t.Fatalf("Save %d: %v", i, err)
		}
	}
	if won < 0 || errs[1-won] == nil {
		t.Fatalf("errors = %v, want exactly one ErrStateConflict", errs)
	}
	got, err := b.Load(ctx)
	if err != nil || !sameState(got, states[won]) {
		t.Fatalf("Load = %+v, %v; want the winner's state", got, err)
	}
	if n := countKeys(t, newClient(t), prefix, "ca/keys/"); n != 1 {
		t.Fatalf("%d keys stored, want the winner's only", n)
	}
}

func TestCAStorageCorrupt(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	cs := openTest(t, c, prefix).CAStorage()
	ctx := ctxT(t, 20*time.Second)
	st := &ca.StoredState{ClusterID: "c1", Index: 1, Roots: []ca.StoredRoot{newRoot(t, "r1", true), newRoot(t, "r2", false)}}
	if err := cs.Save(ctx, nil, st); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, prefix+"ca/keys/r2"); err != nil {
		t.Fatal(err)
	}
	_, err := cs.Load(ctx)
	if !errors.Is(err, ca.ErrStateCorrupt) || !strings.Contains(err.Error(), prefix+"ca/keys/r2") {
		t.Fatalf("Load without a root's key = %v, want ErrStateCorrupt naming the key", err)
	}
	if _, err := c.Put(ctx, prefix+"ca/roots", "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Load(ctx); !errors.Is(err, ca.ErrStateCorrupt) || !strings.Contains(err.Error(), prefix+"ca/roots") {
		t.Fatalf("Load of undecodable roots = %v, want ErrStateCorrupt naming the key", err)
	}
	if _, err := c.Delete(ctx, prefix+"ca/roots"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Load(ctx); !errors.Is(err, ca.ErrStateMissing) {
		t.Fatalf("Load of keys without roots = %v, want ErrStateMissing", err)
	}
}

func TestCAStorageSaveRejects(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	cs := openTest(t, c, prefix).CAStorage()
	ctx := ctxT(t, 20*time.Second)
	noKey := newRoot(t, "r1", true)
	noKey.PrivateKeyPEM = ""
	for name, st := range map[string]*ca.StoredState{
		"nil":          nil,
		"no cluster":   {Roots: []ca.StoredRoot{newRoot(t, "r1", true)}},
		"slash in ID":  {ClusterID: "c", Roots: []ca.StoredRoot{newRoot(t, "r/1", true)}},
		"no key":       {ClusterID: "c", Roots: []ca.StoredRoot{noKey}},
		"duplicate ID": {ClusterID: "c", Roots: []ca.StoredRoot{newRoot(t, "r1", true), newRoot(t, "r1", false)}},
	} {
		if err := cs.Save(ctx, nil, st); err == nil {
			t.Errorf("Save(%s) succeeded", name)
		}
	}
	if n := countKeys(t, c, prefix, ""); n != 0 {
		t.Fatalf("rejected saves wrote %d keys", n)
	}
}

// TestCAStorageWithManagers: two servers' CA managers over one prefix
// share one CA; a rotation by one is loaded by the other, and the feed
// carries the same public roots as the managers.
func TestCAStorageWithManagers(t *testing.T) {
	prefix := testPrefix(t)
	a, b := openTest(t, newClient(t), prefix), openTest(t, newClient(t), prefix)
	ctx := ctxT(t, 20*time.Second)
	newManager := func(s *Store) *ca.Manager {
		m, err := ca.New(ca.Config{Storage: s.CAStorage()}, nil, nil)
		if err != nil {
			t.Fatalf("ca.New: %v", err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	ma := newManager(a)
	mb := newManager(b)
	if ma.TrustDomain() == "" || mb.TrustDomain() != ma.TrustDomain() || !reflect.DeepEqual(ma.Roots(), mb.Roots()) {
		t.Fatalf("managers disagree: %+v vs %+v", ma.Roots(), mb.Roots())
	}
	if err := ma.Rotate(ctx); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if err := mb.Reload(ctx); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := mb.Roots(); len(got.Roots) != 2 || got.ActiveRootID != ma.Roots().ActiveRootID {
		t.Fatalf("after a rotation the other server has %+v, want %+v", got, ma.Roots())
	}
	snap, err := b.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noKeys(t, snap)
	want := ma.Roots()
	if snap.Roots == nil || snap.Roots.TrustDomain != want.TrustDomain || snap.Roots.ActiveRootID != want.ActiveRootID ||
		len(snap.Roots.Roots) != len(want.Roots) {
		t.Fatalf("feed roots = %+v\nmanager roots = %+v", snap.Roots, want)
	}
	for i, r := range want.Roots {
		if got := snap.Roots.Roots[i]; got.ID != r.ID || got.RootCertPEM != r.RootCertPEM || got.Active != r.Active {
			t.Fatalf("feed root %d = %+v, want %+v", i, got, r)
		}
	}
}
