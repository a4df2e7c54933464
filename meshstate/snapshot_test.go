package meshstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// durable reads the durable keys under prefix (relative), as a snapshot
// carries them.
func durable(t *testing.T, c *clientv3.Client, prefix string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, r := range DurableKeys() {
		resp, err := c.Get(ctxT(t, 5*time.Second), prefix+r, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			out[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Value
		}
	}
	return out
}

// writeDurable replaces the durable keys under prefix with kvs (a restore
// does it in one transaction; this test helper need not).
func writeDurable(t *testing.T, c *clientv3.Client, prefix string, kvs map[string][]byte) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	for k := range durable(t, c, prefix) {
		if _, err := c.Delete(ctx, prefix+k); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range kvs {
		if _, err := c.Put(ctx, prefix+k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
}

// meshFixture stores a CA of two roots (r1 active) and one deny intention.
func meshFixture(t *testing.T) (*clientv3.Client, string, *Store, *ca.StoredState) {
	t.Helper()
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	st := &ca.StoredState{ClusterID: "c1", Index: 3, Roots: []ca.StoredRoot{newRoot(t, "r1", true), newRoot(t, "r2", false)}}
	if err := s.CAStorage().Save(ctx, nil, st); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Intentions().Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db",
		Action: intention.ActionDeny}, false); err != nil {
		t.Fatal(err)
	}
	return c, prefix, s, st
}

// TestCheckDurable: an intact snapshot's mesh state is described; a root
// without its key, with another root's key, a stray key, undecodable
// values, two active roots or a key that is not durable are refused.
func TestCheckDurable(t *testing.T) {
	c, prefix, _, st := meshFixture(t)
	snap := durable(t, c, prefix)
	info, err := CheckDurable(snap)
	if err != nil || info.ClusterID != "c1" || info.TrustDomain() != "c1.meshlet" || info.Roots != 2 ||
		info.ActiveRootID != "r1" || info.Intentions != 1 {
		t.Fatalf("CheckDurable = %+v, %v", info, err)
	}
	twoActive := st.Roots[1]
	twoActive.Active = true
	rootsJSON, err := json.Marshal(storedRoots{ClusterID: "c1", Roots: []storedRoot{{Root: st.Roots[0].Root}, {Root: twoActive.Root}}})
	if err != nil {
		t.Fatal(err)
	}
	// r2 with a cross-signed certificate: garbage, or one that is not
	// r2's key (r1's certificate).
	withCross := func(cross string) []byte {
		sr, err := decodeStoredRoots(snap[caRootsKey])
		if err != nil {
			t.Fatal(err)
		}
		sr.Roots[1].IntermediateCertsPEM = []string{cross}
		b, err := json.Marshal(sr)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	garbageCross, otherCross := withCross("garbage"), withCross(st.Roots[0].RootCertPEM)
	edits := map[string]func(m map[string][]byte){
		"garbage cross-signed":   func(m map[string][]byte) { m[caRootsKey] = garbageCross },
		"cross-signed other key": func(m map[string][]byte) { m[caRootsKey] = otherCross },
		"root without its key":   func(m map[string][]byte) { delete(m, caKeysDir+"r2") },
		"keys swapped":           func(m map[string][]byte) { m[caKeysDir+"r1"], m[caKeysDir+"r2"] = m[caKeysDir+"r2"], m[caKeysDir+"r1"] },
		"stray key":              func(m map[string][]byte) { m[caKeysDir+"r9"] = m[caKeysDir+"r1"] },
		"keys without roots":     func(m map[string][]byte) { delete(m, caRootsKey) },
		"undecodable roots":      func(m map[string][]byte) { m[caRootsKey] = []byte(`{"ClusterID":`) },
		"undecodable intention":  func(m map[string][]byte) { m[intentionsKey] = []byte(`{"Intentions":[{"Action":"maybe"}]}`) },
		"two active roots":       func(m map[string][]byte) { m[caRootsKey] = rootsJSON },
		"a catalog key":          func(m map[string][]byte) { m[catalogDir+"n1/a1"] = []byte(`[]`) },
		"garbage key PEM":        func(m map[string][]byte) { m[caKeysDir+"r2"] = []byte("not a key") },
	}
	for name, edit := range edits {
		m := maps.Clone(snap)
		edit(m)
		if _, err := CheckDurable(m); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: CheckDurable = %v, want ErrInvalid", name, err)
		}
	}
	if info, err := CheckDurable(map[string][]byte{}); err != nil || info != (SnapshotInfo{}) {
		t.Errorf("CheckDurable of nothing = %+v, %v", info, err)
	}
}

// TestPrepareRestore: after the intentions were deleted and the CA
// rotated, the prepared keys, written back, are the snapshot's
// intentions and CA (roots and keys; the rotation's new root and key
// gone) with indexes past both; the stored CA loads.
func TestPrepareRestore(t *testing.T) {
	c, prefix, s, _ := meshFixture(t)
	ctx := ctxT(t, 20*time.Second)
	snap := durable(t, c, prefix)
	wantIx, _, _ := s.LoadIntentions(ctx)
	cur, err := s.CAStorage().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Intentions().Delete(ctx, "web", "db"); err != nil {
		t.Fatal(err)
	}
	rotated := &ca.StoredState{ClusterID: "c1", Index: 9, Roots: []ca.StoredRoot{cur.Roots[0], newRoot(t, "r3", true)}}
	rotated.Roots[0].Active = false
	if err := s.CAStorage().Save(ctx, cur, rotated); err != nil {
		t.Fatal(err)
	}
	live := durable(t, c, prefix)
	liveIx, _, _ := s.LoadIntentions(ctx)
	out, info, err := PrepareRestore(snap, live, false)
	if err != nil || info.PreviousClusterID != "" {
		t.Fatalf("PrepareRestore = %+v, %v", info, err)
	}
	if _, ok := out[caKeysDir+"r3"]; ok {
		t.Error("the rotation's key survives the restore")
	}
	writeDurable(t, c, prefix, out)
	got, err := s.CAStorage().Load(ctx)
	if err != nil || len(got.Roots) != 2 || got.Roots[0].ID != "r1" || !got.Roots[0].Active || got.Roots[1].ID != "r2" ||
		got.Roots[0].PrivateKeyPEM != cur.Roots[0].PrivateKeyPEM || got.Index <= rotated.Index {
		t.Errorf("CA after the restore = %+v, %v; want r1 (active) and r2 with their keys, index above %d", got, err, rotated.Index)
	}
	ix, found, err := s.LoadIntentions(ctx)
	if err != nil || !found || len(ix.Intentions) != 1 || ix.Intentions[0].ID != wantIx.Intentions[0].ID || ix.Index <= liveIx.Index {
		t.Errorf("intentions after the restore = %+v, %v; want the snapshot's, index above %d", ix, err, liveIx.Index)
	}
	// Restoring the same again changes no value.
	live = durable(t, c, prefix)
	again, _, err := PrepareRestore(snap, live, false)
	if err != nil || !sameMap(again, live) {
		t.Errorf("a restore over the same mesh state rewrites it: %v", err)
	}
}

// TestPrepareRestoreCAChoices: a snapshot without a CA keeps the stored
// one; a CA of another cluster ID is refused unless allowed.
func TestPrepareRestoreCAChoices(t *testing.T) {
	c, prefix, _, _ := meshFixture(t)
	live := durable(t, c, prefix)
	noCA := map[string][]byte{intentionsKey: live[intentionsKey]}
	out, _, err := PrepareRestore(noCA, live, false)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range live {
		if strings.HasPrefix(k, caDir) && !bytes.Equal(out[k], v) {
			t.Errorf("a snapshot without a CA changed %s", k)
		}
	}
	other := maps.Clone(live)
	var sr storedRoots
	if err := json.Unmarshal(other[caRootsKey], &sr); err != nil {
		t.Fatal(err)
	}
	sr.ClusterID = "c2"
	other[caRootsKey], _ = json.Marshal(sr)
	if _, _, err := PrepareRestore(other, live, false); !errors.Is(err, ErrOtherCA) {
		t.Errorf("another trust domain's CA = %v, want ErrOtherCA", err)
	}
	out, info, err := PrepareRestore(other, live, true)
	if err != nil || info.PreviousClusterID != "c1" || info.ClusterID != "c2" {
		t.Fatalf("allowed other CA = %+v, %v", info, err)
	}
	if err := json.Unmarshal(out[caRootsKey], &sr); err != nil || sr.ClusterID != "c2" {
		t.Errorf("restored roots of cluster %q, %v; want c2", sr.ClusterID, err)
	}
	// No intentions in the snapshot, none stored: none written.
	if out, _, err := PrepareRestore(map[string][]byte{}, map[string][]byte{}, false); err != nil || len(out) != 0 {
		t.Errorf("restore of nothing over nothing = %v, %v", out, err)
	}
}

func sameMap(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return bytes.Equal(x, y) })
}
