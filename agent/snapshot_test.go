package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/state"
)

// TestSnapshotSaveAndRestore: a snapshot taken through the official
// client and restored later brings the state back (a job registered in
// between is gone); a damaged snapshot is refused and changes nothing.
func TestSnapshotSaveAndRestore(t *testing.T) {
	a := startAgent(t, t.TempDir())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: "http://" + a.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Operator().Snapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(snap) == 0 {
		t.Fatalf("snapshot: %d bytes, %v", len(snap), err)
	}
	job := &nomadapi.Job{ID: ptr("after-snapshot"), Name: ptr("after-snapshot"), Datacenters: []string{"dc1"},
		TaskGroups: []*nomadapi.TaskGroup{{Name: ptr("g"), Count: ptr(0),
			Tasks: []*nomadapi.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), snap...)
	bad[len(bad)/2] ^= 0xff
	if _, err := c.Operator().SnapshotRestore(bytes.NewReader(bad), nil); err == nil {
		t.Fatal("a damaged snapshot was restored")
	}
	if _, _, err := c.Jobs().Info("after-snapshot", nil); err != nil {
		t.Fatalf("the refused restore changed the state: %v", err)
	}
	if _, err := c.Operator().SnapshotRestore(bytes.NewReader(snap), nil); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, _, err := c.Jobs().Info("after-snapshot", nil); err == nil {
		t.Error("the job registered after the snapshot is still there after the restore")
	}
	nodes, _, err := c.Nodes().List(nil)
	if err != nil || len(nodes) != 1 {
		t.Errorf("nodes after the restore = %d, %v; want this node", len(nodes), err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSnapshotCarriesMeshState: a snapshot holds the intentions and the
// CA: a deny intention deleted and a CA rotation made after it are undone
// by its restore, on the running server (its mirror and its CA, reloaded
// through the mesh feed); the trust domain stays, and a leaf issued after
// the restore verifies against the snapshot's roots.
func TestSnapshotCarriesMeshState(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp, ixw := a.controlPlane, a.mesh.store.Intentions()
	if _, _, err := ixw.Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db",
		Action: intention.ActionDeny}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deny intention on the agent", func() bool { return denied(cp.Intentions, "web", "db") })
	before, td := cp.CA.Roots(), cp.CA.TrustDomain()
	var snap bytes.Buffer
	if err := a.backend.SaveSnapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}

	if _, _, err := ixw.Delete(ctx, "web", "db"); err != nil {
		t.Fatal(err)
	}
	if err := cp.CA.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the intention gone", func() bool { return !denied(cp.Intentions, "web", "db") })
	if cp.CA.Roots().ActiveRootID == before.ActiveRootID {
		t.Fatal("the rotation kept the active root")
	}

	if err := a.backend.RestoreSnapshot(ctx, bytes.NewReader(snap.Bytes()), api.SnapshotRestoreOptions{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	waitFor(t, "the deny intention back", func() bool { return denied(cp.Intentions, "web", "db") })
	waitFor(t, "the snapshot's CA roots", func() bool { return sameRootIDs(cp.CA.Roots(), before) })
	if got := cp.CA.TrustDomain(); got != td {
		t.Errorf("trust domain after the restore = %s, want %s", got, td)
	}
	stored, err := a.mesh.store.CAStorage().Load(ctx)
	if err != nil || stored == nil || len(stored.Roots) != len(before.Roots) {
		t.Fatalf("stored CA after the restore = %+v, %v; want the snapshot's %d roots", stored, err, len(before.Roots))
	}
	for i, r := range stored.Roots {
		if r.ID != before.Roots[i].ID || r.PrivateKeyPEM == "" {
			t.Errorf("stored root %d = %s (key %t), want %s with its key", i, r.ID, r.PrivateKeyPEM != "", before.Roots[i].ID)
		}
	}
	leaf, err := cp.CA.Leaf(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, leaf.CertPEM, before)
}

// TestSnapshotOfAnotherTrustDomainNeedsForce: a snapshot whose CA is of
// another trust domain than the cluster's (here: the cluster's CA replaced
// after the snapshot) is refused without force and changes nothing.
func TestSnapshotOfAnotherTrustDomainNeedsForce(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var snap bytes.Buffer
	if err := a.backend.SaveSnapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	// Another CA in etcd: the snapshot's cluster ID with one letter changed.
	cas := a.mesh.store.CAStorage()
	cur, err := cas.Load(ctx)
	if err != nil || cur == nil {
		t.Fatalf("stored CA = %v, %v", cur, err)
	}
	other := *cur
	other.ClusterID = "0" + cur.ClusterID[1:]
	if other.ClusterID == cur.ClusterID {
		other.ClusterID = "1" + cur.ClusterID[1:]
	}
	if err := cas.Save(ctx, cur, &other); err != nil {
		t.Fatal(err)
	}
	err = a.backend.RestoreSnapshot(ctx, bytes.NewReader(snap.Bytes()), api.SnapshotRestoreOptions{})
	if !errors.Is(err, api.ErrInvalid) || !errors.Is(err, state.ErrSnapshotCluster) || !strings.Contains(err.Error(), "trust domain") {
		t.Fatalf("restore of another trust domain's CA = %v, want ErrInvalid, ErrSnapshotCluster", err)
	}
	if got, err := cas.Load(ctx); err != nil || got.ClusterID != other.ClusterID {
		t.Errorf("the refused restore changed the CA: %+v, %v", got, err)
	}
	err = a.backend.RestoreSnapshot(ctx, bytes.NewReader(snap.Bytes()), api.SnapshotRestoreOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "restart every server agent") {
		t.Errorf("forced restore = %v, want one that asks for a restart", err)
	}
	if got, err := cas.Load(ctx); err != nil || got.ClusterID != cur.ClusterID {
		t.Errorf("the forced restore left the CA of cluster %v (%v), want %s", got, err, cur.ClusterID)
	}
}

func denied(s *intention.Store, src, dst string) bool {
	ix, err := s.Get(src, dst)
	return err == nil && ix.Action == intention.ActionDeny
}

func sameRootIDs(a, b ca.Roots) bool {
	if a.ActiveRootID != b.ActiveRootID || len(a.Roots) != len(b.Roots) {
		return false
	}
	for i := range a.Roots {
		if a.Roots[i].ID != b.Roots[i].ID {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// verifyLeaf checks that certPEM (the leaf, then intermediates) chains to
// one of roots.
func verifyLeaf(t *testing.T, certPEM string, roots ca.Roots) {
	t.Helper()
	pool, err := roots.CertPool()
	if err != nil {
		t.Fatal(err)
	}
	var certs []*x509.Certificate
	for rest := []byte(certPEM); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		t.Fatal("no certificate in the leaf")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("a leaf issued after the restore does not verify against the snapshot's roots: %v", err)
	}
}

// TestSnapshotMeshStateOldAndCorrupt: a snapshot without the mesh state
// (the format before it) restores the scheduler state and leaves the
// intentions as they are; a snapshot whose mesh state lacks a root's key
// (checksum made right again) is refused and changes nothing.
func TestSnapshotMeshStateOldAndCorrupt(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := a.store.(*state.EtcdStore)
	var old, cur bytes.Buffer
	if err := st.Snapshot(ctx, &old); err != nil {
		t.Fatal(err)
	}
	if err := a.backend.SaveSnapshot(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.mesh.store.Intentions().Upsert(ctx, intention.Intention{SourceName: "a", DestinationName: "b",
		Action: intention.ActionDeny}, false); err != nil {
		t.Fatal(err)
	}
	caBefore, err := a.mesh.store.CAStorage().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lines := gunzipLines(t, cur.Bytes())
	var kept []string
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, `{"s":"connect","k":"ca/keys/`) {
			kept = append(kept, l)
		}
	}
	if len(kept) == len(lines)-1 {
		t.Fatal("the snapshot holds no root key")
	}
	hdr := map[string]any{}
	if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil {
		t.Fatal(err)
	}
	sec := hdr["sections"].([]any)[0].(map[string]any)
	sec["keys"] = sec["keys"].(float64) - float64(len(lines)-1-len(kept))
	h, _ := json.Marshal(hdr)
	kept[0] = string(h)
	bad := gzipLines(kept)
	err = a.backend.RestoreSnapshot(ctx, bytes.NewReader(bad), api.SnapshotRestoreOptions{})
	if !errors.Is(err, api.ErrInvalid) || !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), "private key") {
		t.Fatalf("restore of a snapshot without its root keys = %v, want ErrInvalid, ErrBadSnapshot", err)
	}
	if got, err := a.mesh.store.CAStorage().Load(ctx); err != nil || got.Revision != caBefore.Revision {
		t.Errorf("the refused restore changed the CA: %v", err)
	}
	if err := a.backend.RestoreSnapshot(ctx, bytes.NewReader(old.Bytes()), api.SnapshotRestoreOptions{}); err != nil {
		t.Fatalf("restore of a snapshot without the mesh state: %v", err)
	}
	if ix, found, err := a.mesh.store.LoadIntentions(ctx); err != nil || !found || len(ix.Intentions) != 1 {
		t.Errorf("intentions after restoring a snapshot without them = %+v, %v; want the one created after it", ix, err)
	}
}

// gunzipLines is a snapshot's lines, trailer last.
func gunzipLines(t *testing.T, snap []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(plain), "\n"), "\n")
}

// gzipLines writes lines (header and entries) as a snapshot with a
// correct checksum.
func gzipLines(lines []string) []byte {
	body := strings.Join(lines, "\n") + "\n"
	sum := sha256.Sum256([]byte(body))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = fmt.Fprintf(zw, "%s{\"sha256\":%q}\n", body, hex.EncodeToString(sum[:]))
	_ = zw.Close()
	return buf.Bytes()
}
