package state

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sectionFixture is a store at <base>state/ and a section at <base>side/
// with ranges "keep/" and "one"; "other/" beside them is outside.
type sectionFixture struct {
	c       *clientv3.Client
	s       *EtcdStore
	side    string
	sec     SnapshotSection
	prepare atomic.Int32 // calls of the section's Prepare
	// hook, when set, runs in Prepare (after the live read).
	hook func(call int32, snap, live map[string][]byte) error
}

func newSectionFixture(t *testing.T, c *clientv3.Client, opts EtcdOptions) *sectionFixture {
	t.Helper()
	base := testPrefix(t)
	opts.Prefix = base + "state/"
	f := &sectionFixture{c: c, side: base + "side/"}
	s, err := tryOpenEtcd(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	f.s = s
	f.sec = SnapshotSection{Name: "side", Prefix: f.side, Ranges: []string{"one", "keep/"},
		Prepare: func(snap, live map[string][]byte) (map[string][]byte, error) {
			n := f.prepare.Add(1)
			if f.hook != nil {
				if err := f.hook(n, snap, live); err != nil {
					return nil, err
				}
			}
			return snap, nil
		}}
	return f
}

func (f *sectionFixture) put(t *testing.T, kvs map[string]string) {
	t.Helper()
	for k, v := range kvs {
		var err error
		if v == "" {
			_, err = f.c.Delete(context.Background(), f.side+k)
		} else {
			_, err = f.c.Put(context.Background(), f.side+k, v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (f *sectionFixture) snapshot(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f.s.SnapshotWith(context.Background(), &buf, SnapshotOptions{Sections: []SnapshotSection{f.sec}}); err != nil {
		t.Fatalf("SnapshotWith: %v", err)
	}
	return buf.Bytes()
}

func (f *sectionFixture) restore(snap []byte) error {
	return f.s.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{Sections: []SnapshotSection{f.sec}})
}

// populateSection writes the section's keys the tests snapshot.
func (f *sectionFixture) populate(t *testing.T) {
	f.put(t, map[string]string{"one": "1", "keep/a": "a", "keep/b": "b", "other/x": "x"})
}

// changeSection moves the section away from populate's.
func (f *sectionFixture) change(t *testing.T) {
	f.put(t, map[string]string{"one": "", "keep/a": "A", "keep/b": "", "keep/c": "c", "other/x": "X", "other/y": "y"})
}

var wantSection = map[string]string{"one": "1", "keep/a": "a", "keep/b": "b", "other/x": "X", "other/y": "y"}

// TestEtcdSnapshotSections: a snapshot carries a section's ranges (not the
// keys beside them), read at the state's revision; the restore puts the
// ranges back exactly (changed keys, deleted ones, added ones) in the same
// transaction as the state, and leaves the keys outside them alone.
func TestEtcdSnapshotSections(t *testing.T) {
	f := newSectionFixture(t, newTestClient(t), EtcdOptions{})
	populate(t, f.s, 2)
	f.populate(t)
	snap := f.snapshot(t)
	d, err := readSnapshot(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if d.hdr.Version != 2 || len(d.hdr.Sections) != 1 || d.hdr.Sections[0] != (SectionHeader{Name: "side", Keys: 3}) {
		t.Fatalf("header = %+v, want version 2 with section side of 3 keys", d.hdr)
	}
	want := rawKeys(t, f.c, f.s.Prefix(), false)
	delete(want, "index")
	wantView := viewOf(t, f.s)
	change(t, f.s, "web-000")
	f.change(t)
	above := f.s.Index()
	before := f.s.Index()
	if err := f.restore(snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := rawKeys(t, f.c, f.side, false); !reflect.DeepEqual(got, wantSection) {
		t.Errorf("section after restore = %v, want %v", got, wantSection)
	}
	checkRestored(t, f.s, f.c, f.s.Prefix(), want, wantView, above)
	// One transaction: the section's keys and the index share a revision.
	resp, err := f.c.Get(context.Background(), f.side+"keep/a")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := f.c.Get(context.Background(), f.s.Prefix()+"index", clientv3.WithRev(resp.Kvs[0].ModRevision))
	if err != nil || len(idx.Kvs) == 0 || string(idx.Kvs[0].Value) == fmt.Sprint(before) {
		t.Errorf("the section was written before the restored index (index at its revision: %v, %v)", idx.Kvs, err)
	}
}

// TestEtcdRestoreOldSnapshotLeavesSections: a snapshot without sections
// (the format before them) restores the state and leaves every section
// as it is, even when the restore is given sections.
func TestEtcdRestoreOldSnapshotLeavesSections(t *testing.T) {
	f := newSectionFixture(t, newTestClient(t), EtcdOptions{})
	populate(t, f.s, 2)
	f.populate(t)
	snap := snapshotOf(t, f.s)
	if d, err := readSnapshot(bytes.NewReader(snap)); err != nil || d.hdr.Version != 1 || d.hdr.Sections != nil {
		t.Fatalf("snapshot without sections: %+v, %v; want version 1", d, err)
	}
	want := rawKeys(t, f.c, f.s.Prefix(), false)
	delete(want, "index")
	wantView := viewOf(t, f.s)
	change(t, f.s, "web-001")
	f.change(t)
	side := rawKeys(t, f.c, f.side, true)
	above := f.s.Index()
	if err := f.restore(snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	checkRestored(t, f.s, f.c, f.s.Prefix(), want, wantView, above)
	if got := rawKeys(t, f.c, f.side, true); !reflect.DeepEqual(got, side) {
		t.Errorf("an old snapshot's restore changed the section:\n got %v\nwant %v", got, side)
	}
	if f.prepare.Load() != 0 {
		t.Errorf("Prepare ran %d times for a snapshot without the section", f.prepare.Load())
	}
}

// rewrite decodes a snapshot, lets edit change its lines (header first,
// trailer dropped) and writes it again with a correct checksum: damage
// only the restore's own checks can tell.
func rewrite(t *testing.T, snap []byte, edit func([]string) []string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(plain))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	body := strings.Join(edit(lines[:len(lines)-1]), "\n") + "\n"
	sum := sha256.Sum256([]byte(body))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = fmt.Fprintf(zw, "%s{\"sha256\":%q}\n", body, hex.EncodeToString(sum[:]))
	_ = zw.Close()
	return buf.Bytes()
}

// TestEtcdRestoreRefusesBadSection: a snapshot whose section is damaged,
// unknown to the restore, or refused by its Prepare changes nothing, in
// the state or in the section.
func TestEtcdRestoreRefusesBadSection(t *testing.T) {
	f := newSectionFixture(t, newTestClient(t), EtcdOptions{})
	populate(t, f.s, 2)
	f.populate(t)
	snap := f.snapshot(t)
	change(t, f.s, "web-000")
	f.change(t)
	stateKeys, side := rawKeys(t, f.c, f.s.Prefix(), true), rawKeys(t, f.c, f.side, true)
	replace := func(old, new string) func([]string) []string {
		return func(lines []string) []string {
			for i, l := range lines {
				lines[i] = strings.Replace(l, old, new, 1)
			}
			return lines
		}
	}
	bad := corruptions(t, snap)
	bad["key outside the ranges"] = rewrite(t, snap, replace(`"k":"keep/b"`, `"k":"other/b"`))
	bad["section not in the header"] = rewrite(t, snap, replace(`"s":"side","k":"one"`, `"s":"else","k":"one"`))
	bad["section count"] = rewrite(t, snap, replace(`"keys":3}`, `"keys":2}`))
	bad["state key after the section"] = rewrite(t, snap, func(l []string) []string { return append(l, `{"k":"zz","v":""}`) })
	bad["section keys out of order"] = rewrite(t, snap, func(l []string) []string {
		n := len(l)
		l[n-1], l[n-2] = l[n-2], l[n-1]
		return l
	})
	for name, b := range bad {
		if err := f.restore(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
	}
	// A snapshot with a section the restore does not know.
	if err := f.s.Restore(context.Background(), bytes.NewReader(snap), RestoreOptions{}); !errors.Is(err, ErrBadSnapshot) ||
		!strings.Contains(err.Error(), `"side"`) {
		t.Errorf("Restore without the snapshot's section = %v, want ErrBadSnapshot naming it", err)
	}
	// Prepare refuses it: as a damaged snapshot, or as another cluster's.
	for _, perr := range []error{errors.New("bad value"), fmt.Errorf("%w: other CA", ErrSnapshotCluster)} {
		f.hook = func(int32, map[string][]byte, map[string][]byte) error { return perr }
		err := f.restore(snap)
		if want := map[bool]error{true: ErrSnapshotCluster, false: ErrBadSnapshot}[errors.Is(perr, ErrSnapshotCluster)]; !errors.Is(err, want) {
			t.Errorf("Prepare failing with %v: Restore = %v, want %v", perr, err, want)
		}
	}
	if got := rawKeys(t, f.c, f.s.Prefix(), true); !reflect.DeepEqual(got, stateKeys) {
		t.Errorf("refused restores changed the state:\n got %v\nwant %v", got, stateKeys)
	}
	if got := rawKeys(t, f.c, f.side, true); !reflect.DeepEqual(got, side) {
		t.Errorf("refused restores changed the section:\n got %v\nwant %v", got, side)
	}
	f.hook = nil
	if err := f.restore(snap); err != nil {
		t.Errorf("the intact snapshot: %v", err)
	}
}

// TestEtcdRestoreSectionRace: a section key written between the restore's
// read of the section and its commit makes it plan again: the section
// ends exactly as the snapshot's (the racing key deleted).
func TestEtcdRestoreSectionRace(t *testing.T) {
	f := newSectionFixture(t, newTestClient(t), EtcdOptions{})
	populate(t, f.s, 1)
	f.populate(t)
	snap := f.snapshot(t)
	f.change(t)
	f.hook = func(call int32, _, _ map[string][]byte) error {
		if call == 1 {
			_, err := f.c.Put(context.Background(), f.side+"keep/racing", "r")
			return err
		}
		return nil
	}
	if err := f.restore(snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := rawKeys(t, f.c, f.side, false); !reflect.DeepEqual(got, wantSection) {
		t.Errorf("section after a racing restore = %v, want %v", got, wantSection)
	}
	if n := f.prepare.Load(); n < 2 {
		t.Errorf("Prepare ran %d times, want a second plan after the race", n)
	}
}

// TestEtcdRestoreSectionsInBatches: under etcd's default limits the state
// is restored in batches under the lock, then the section in one
// transaction (planned again after a racing write), then the index.
func TestEtcdRestoreSectionsInBatches(t *testing.T) {
	e, err := startMember(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var logs bytes.Buffer
	f := newSectionFixture(t, newClient(t, e.Clients[0].Addr().String()),
		EtcdOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	populate(t, f.s, 30)
	must2(t)(f.s.ApplyPlan(planOf("db", 30, "db[0]")))
	f.populate(t)
	snap := f.snapshot(t)
	want := rawKeys(t, f.c, f.s.Prefix(), false)
	delete(want, "index")
	wantView := viewOf(t, f.s)
	var gone []string
	for i := 0; i < 25; i++ {
		gone = append(gone, fmt.Sprintf("db-%03d", i))
	}
	change(t, f.s, gone...)
	f.change(t)
	above := f.s.Index()
	var sawLock atomic.Bool
	f.hook = func(call int32, _, live map[string][]byte) error {
		// A write after the first plan's read: the section's own
		// transaction, after the state's batches, fails its guard and
		// plans the section again, under the lock.
		if call == 1 {
			_, err := f.c.Put(context.Background(), f.side+"keep/racing", "r")
			return err
		}
		if call == 2 {
			resp, err := f.c.Get(context.Background(), f.s.Prefix()+"index")
			sawLock.Store(err == nil && len(resp.Kvs) == 1 && strings.HasPrefix(string(resp.Kvs[0].Value), restoreLock))
		}
		return nil
	}
	if err := f.restore(snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !strings.Contains(logs.String(), "restoring in batches") {
		t.Errorf("the restore fit one transaction under the default limits; logs:\n%s", logs.String())
	}
	if !sawLock.Load() {
		t.Error("the section was planned again without the state's restore lock held")
	}
	checkRestored(t, f.s, f.c, f.s.Prefix(), want, wantView, above)
	if got := rawKeys(t, f.c, f.side, false); !reflect.DeepEqual(got, wantSection) {
		t.Errorf("section after a batched restore = %v, want %v", got, wantSection)
	}
}
