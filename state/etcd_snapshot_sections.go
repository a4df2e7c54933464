package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SnapshotSection is a key range beside the state that snapshots carry
// and restores replace: the mesh state (package meshstate) is one. The
// caller knows its layout; the store only copies, checks and writes it.
type SnapshotSection struct {
	// Name identifies the section in a snapshot ("connect"). A restore
	// needs a section of every name the snapshot carries.
	Name string
	// Prefix of the section's keys, ending in "/"; neither inside the
	// state's prefix nor around it.
	Prefix string
	// Ranges are the sub-prefixes of Prefix that a snapshot copies and a
	// restore replaces; keys outside them are neither saved nor touched.
	// No range may be a prefix of another.
	Ranges []string
	// Prepare returns the keys (relative to Prefix, within Ranges) a
	// restore writes in place of live, the keys stored now: snap's keys,
	// or a version of them (nil Prepare: snap as it is). Live keys it
	// leaves out are deleted; keys whose value is live's are not written.
	// It validates snap; its error refuses the restore before anything is
	// written, as ErrBadSnapshot unless it wraps ErrSnapshotCluster.
	Prepare func(snap, live map[string][]byte) (map[string][]byte, error)
}

// SectionHeader names one section of a snapshot (version 2) and counts
// its keys.
type SectionHeader struct {
	Name string `json:"name"`
	Keys int    `json:"keys"`
}

// SnapshotOptions tune SnapshotWith.
type SnapshotOptions struct {
	// Sections are key ranges to carry beside the state's keys.
	Sections []SnapshotSection
}

// Prefix is the store's key prefix, ending in "/".
func (s *EtcdStore) Prefix() string { return s.prefix }

// checkSections rejects sections that overlap each other or the state,
// and returns them with their ranges in key order.
func (s *EtcdStore) checkSections(secs []SnapshotSection) ([]SnapshotSection, error) {
	out := make([]SnapshotSection, len(secs))
	for i, sec := range secs {
		switch {
		case sec.Name == "" || strings.ContainsAny(sec.Name, " \n\"/"):
			return nil, fmt.Errorf("snapshot section %q: invalid name", sec.Name)
		case !strings.HasSuffix(sec.Prefix, "/") || strings.HasPrefix(sec.Prefix, s.prefix) || strings.HasPrefix(s.prefix, sec.Prefix):
			return nil, fmt.Errorf("snapshot section %s: prefix %q must end in / and lie beside the state's %s", sec.Name, sec.Prefix, s.prefix)
		case len(sec.Ranges) == 0:
			return nil, fmt.Errorf("snapshot section %s: no key ranges", sec.Name)
		}
		for _, o := range out[:i] {
			if o.Name == sec.Name || strings.HasPrefix(o.Prefix, sec.Prefix) || strings.HasPrefix(sec.Prefix, o.Prefix) {
				return nil, fmt.Errorf("snapshot sections %s and %s overlap", o.Name, sec.Name)
			}
		}
		sec.Ranges = slices.Sorted(slices.Values(sec.Ranges))
		for j := 1; j < len(sec.Ranges); j++ {
			if strings.HasPrefix(sec.Ranges[j], sec.Ranges[j-1]) {
				return nil, fmt.Errorf("snapshot section %s: ranges %q and %q overlap", sec.Name, sec.Ranges[j-1], sec.Ranges[j])
			}
		}
		out[i] = sec
	}
	return out, nil
}

// inRanges reports whether key (relative to the section's prefix) is in
// one of its ranges.
func (sec SnapshotSection) inRanges(key string) bool {
	for _, r := range sec.Ranges {
		if strings.HasPrefix(key, r) {
			return true
		}
	}
	return false
}

// countSection counts the section's keys at rev.
func (s *EtcdStore) countSection(ctx context.Context, sec SnapshotSection, rev int64) (int, error) {
	n := 0
	for _, r := range sec.Ranges {
		resp, err := s.c.Get(ctx, sec.Prefix+r, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
		if err != nil {
			return 0, s.etcdErr("count the keys of snapshot section "+sec.Name, err)
		}
		n += int(resp.Count)
	}
	return n, nil
}

// copyRange writes an entry of every key under base+sub at rev (keys
// relative to base, in key order; section "" is the state) and counts
// them.
func (s *EtcdStore) copyRange(ctx context.Context, enc *json.Encoder, rev int64, section, base, sub string) (int, error) {
	n := 0
	end := clientv3.GetPrefixRangeEnd(base + sub)
	for from := base + sub; ; {
		cctx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(cctx, from, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(snapshotPage))
		cancel()
		if err != nil {
			return n, s.etcdErr("read keys for a snapshot", err)
		}
		for _, e := range resp.Kvs {
			if err := enc.Encode(snapshotEntry{S: section, K: strings.TrimPrefix(string(e.Key), base), V: e.Value}); err != nil {
				return n, fmt.Errorf("failed to write snapshot: %w", err)
			}
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// sectionRestore is one section a restore replaces: the snapshot's keys.
type sectionRestore struct {
	sec  SnapshotSection
	snap map[string][]byte
}

// sectionsToRestore pairs the snapshot's sections with secs: a section
// the restore does not know, or a key outside its ranges, is refused.
// Sections of secs the snapshot lacks (every one, in a version 1
// snapshot) are left as they are.
func sectionsToRestore(d *snapshotData, secs []SnapshotSection) ([]sectionRestore, error) {
	var out []sectionRestore
	for i, h := range d.hdr.Sections {
		j := slices.IndexFunc(secs, func(sec SnapshotSection) bool { return sec.Name == h.Name })
		if j < 0 {
			return nil, badSnapshot("it carries section %q, which this restore does not know", h.Name)
		}
		sr := sectionRestore{sec: secs[j], snap: make(map[string][]byte, len(d.secKVs[i]))}
		for _, e := range d.secKVs[i] {
			if !sr.sec.inRanges(e.key) {
				return nil, badSnapshot("section %s: key %q is outside its ranges %q", h.Name, e.key, sr.sec.Ranges)
			}
			sr.snap[e.key] = e.val
		}
		out = append(out, sr)
	}
	return out, nil
}

// sectionPlan is what a restore writes to one section, and the guards
// that hold while the section is as it was planned.
type sectionPlan struct {
	src    sectionRestore
	ops    []clientv3.Op
	guards []clientv3.Cmp
}

// planSection reads the section's live keys (at one revision), asks its
// Prepare for the keys to write, and lists the writes: puts of changed
// values, deletes of live keys left out. The guards fail if any key of
// the section's ranges is written after that revision.
func (s *EtcdStore) planSection(ctx context.Context, sr sectionRestore) (*sectionPlan, error) {
	sec := sr.sec
	gets := make([]clientv3.Op, len(sec.Ranges))
	for i, r := range sec.Ranges {
		gets[i] = clientv3.OpGet(sec.Prefix+r, clientv3.WithPrefix())
	}
	cctx, cancel := s.opCtx(ctx)
	resp, err := s.c.Txn(cctx).Then(gets...).Commit()
	cancel()
	if err != nil {
		return nil, s.etcdErr("read snapshot section "+sec.Name, err)
	}
	live := map[string][]byte{}
	for _, r := range resp.Responses {
		for _, e := range r.GetResponseRange().Kvs {
			live[strings.TrimPrefix(string(e.Key), sec.Prefix)] = e.Value
		}
	}
	want := sr.snap
	if sec.Prepare != nil {
		if want, err = sec.Prepare(sr.snap, live); err != nil {
			if errors.Is(err, ErrSnapshotCluster) {
				return nil, fmt.Errorf("snapshot section %s: %w", sec.Name, err)
			}
			return nil, badSnapshot("section %s: %w", sec.Name, err)
		}
	}
	p := &sectionPlan{src: sr}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !sec.inRanges(k) {
			return nil, fmt.Errorf("snapshot section %s: Prepare returned key %q outside the ranges %q", sec.Name, k, sec.Ranges)
		}
		if v, ok := live[k]; !ok || !bytes.Equal(v, want[k]) {
			p.ops = append(p.ops, clientv3.OpPut(sec.Prefix+k, string(want[k])))
		}
	}
	for k := range live {
		if _, ok := want[k]; !ok {
			p.ops = append(p.ops, clientv3.OpDelete(sec.Prefix+k))
		}
	}
	if len(p.ops) > 0 {
		for _, r := range sec.Ranges {
			p.guards = append(p.guards,
				clientv3.Compare(clientv3.ModRevision(sec.Prefix+r), "<", resp.Header.Revision+1).WithPrefix())
		}
	}
	return p, nil
}

// restoreSection writes a section in one transaction under the batched
// restore's lock, planning it again (up to 5 times) when one of its keys
// changed since it was planned.
func (s *EtcdStore) restoreSection(ctx context.Context, locked clientv3.Cmp, sp *sectionPlan) error {
	for try := 0; len(sp.ops) > 0; try++ {
		err := s.commitGuards(ctx, "restore snapshot section "+sp.src.sec.Name, append([]clientv3.Cmp{locked}, sp.guards...), sp.ops)
		if !errors.Is(err, ErrConflict) || try == 4 {
			return err
		}
		if sp, err = s.planSection(ctx, sp.src); err != nil {
			return err
		}
	}
	return nil
}
