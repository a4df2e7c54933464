package state

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sentinel errors of snapshots.
var (
	// ErrBadSnapshot: the stream is not a complete, intact meshlet
	// snapshot this version can read; nothing was restored.
	ErrBadSnapshot = errors.New("invalid state snapshot")
	// ErrSnapshotCluster: the snapshot belongs to another cluster.
	ErrSnapshotCluster = errors.New("snapshot of another cluster")
	// ErrRestoring: an interrupted restore left its lock on the state.
	ErrRestoring = errors.New("a snapshot restore is in progress or was interrupted")
)

const (
	// snapshotVersion is the newest snapshot version: 2 adds sections
	// (SnapshotWith writes 1 when it has none, as before them).
	snapshotVersion = 2
	// snapshotPage is how many keys one read of Snapshot fetches.
	snapshotPage = 256
	// maxSnapshotBytes bounds an uncompressed snapshot that Restore holds
	// in memory (etcd's default backend quota is 2 GiB).
	maxSnapshotBytes = 2 << 30
	// restoreBatchOps and restoreBatchBytes keep each transaction of a
	// batched restore within etcd's default limits (128 operations, 1.5
	// MiB per request).
	restoreBatchOps   = 100
	restoreBatchBytes = 1 << 20
	// restoreLock starts the index's value while a batched restore runs.
	restoreLock = "restoring "
)

// SnapshotHeader is the first line of a snapshot.
type SnapshotHeader struct {
	Version   int       `json:"meshlet_snapshot"`
	Format    int       `json:"format"`
	ClusterID string    `json:"cluster_id"`
	Index     uint64    `json:"index"`
	Revision  int64     `json:"revision"`
	Created   time.Time `json:"created"`
	Keys      int       `json:"keys"`
	// Sections (version 2) are the key ranges beside the state the
	// snapshot carries, in the order their entries follow the state's.
	Sections []SectionHeader `json:"sections,omitempty"`
}

type snapshotEntry struct {
	S string `json:"s,omitempty"`
	K string `json:"k"`
	V []byte `json:"v"`
}

// snapshotLine is an entry or the trailer, as read back.
type snapshotLine struct {
	S   *string `json:"s"`
	K   *string `json:"k"`
	V   []byte  `json:"v"`
	Sum *string `json:"sha256"`
}

// snapshotData is a snapshot as read back: the state's keys and each
// section's (secKVs[i] are those of hdr.Sections[i]).
type snapshotData struct {
	hdr    *SnapshotHeader
	kvs    []kv
	secKVs [][]kv
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force restores a snapshot of another cluster.
	Force bool
	// Sections the restore replaces when the snapshot carries them (a
	// snapshot carrying a section not listed here is refused).
	Sections []SnapshotSection
}

// Snapshot writes a logical snapshot of the state to w: SnapshotWith
// without sections.
func (s *EtcdStore) Snapshot(ctx context.Context, w io.Writer) error {
	return s.SnapshotWith(ctx, w, SnapshotOptions{})
}

// SnapshotWith writes a logical snapshot to w: a copy of every key under
// the store's prefix and of every key in the ranges of opts.Sections, all
// read at one etcd revision, so it is consistent while servers write and
// works the same with the embedded member and with an external etcd (whose
// own `etcdctl snapshot` copies the whole cluster instead). It fails if
// that revision is compacted before the last page is read, and while a
// restore holds its lock (ErrRestoring). The stream is gzip of JSON lines:
//
//	{"meshlet_snapshot":2,"format":1,"cluster_id":…,"index":…,"revision":…,"created":…,"keys":N,
//	 "sections":[{"name":"connect","keys":M}]}
//	{"k":"jobs/web","v":"<base64>"}          N lines, keys relative to the prefix, in key order
//	{"s":"connect","k":"intentions","v":…}   M lines per section, keys relative to the
//	                                         section's prefix, in key order; sections in
//	                                         the header's order
//	{"sha256":"<hex>"}                       of every uncompressed byte before this line
//
// Without sections the header has version 1 and no "sections": the format
// of meshlets before sections, which Restore still reads.
func (s *EtcdStore) SnapshotWith(ctx context.Context, w io.Writer, opts SnapshotOptions) error {
	secs, err := s.checkSections(opts.Sections)
	if err != nil {
		return err
	}
	hdr, err := s.snapshotHeader(ctx, secs)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(w)
	sum := sha256.New()
	enc := json.NewEncoder(io.MultiWriter(zw, sum))
	if err := enc.Encode(hdr); err != nil {
		return fmt.Errorf("failed to write snapshot: %w", err)
	}
	n, err := s.copyRange(ctx, enc, hdr.Revision, "", s.prefix, "")
	if err != nil {
		return err
	}
	if n != hdr.Keys {
		return fmt.Errorf("failed to snapshot: read %d keys at revision %d, counted %d", n, hdr.Revision, hdr.Keys)
	}
	for i, sec := range secs {
		n = 0
		for _, r := range sec.Ranges {
			m, err := s.copyRange(ctx, enc, hdr.Revision, sec.Name, sec.Prefix, r)
			if err != nil {
				return err
			}
			n += m
		}
		if n != hdr.Sections[i].Keys {
			return fmt.Errorf("failed to snapshot: read %d keys of section %s at revision %d, counted %d",
				n, sec.Name, hdr.Revision, hdr.Sections[i].Keys)
		}
	}
	trailer := fmt.Sprintf("{\"sha256\":%q}\n", hex.EncodeToString(sum.Sum(nil)))
	if _, err := io.WriteString(zw, trailer); err != nil {
		return fmt.Errorf("failed to write snapshot: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("failed to write snapshot: %w", err)
	}
	return nil
}

// snapshotHeader reads the index and counts the keys (the state's and each
// section's), at one revision.
func (s *EtcdStore) snapshotHeader(ctx context.Context, secs []SnapshotSection) (*SnapshotHeader, error) {
	cctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(cctx, s.prefix+"index")
	if err != nil {
		return nil, s.etcdErr("read the index", err)
	}
	idx, locked, err := s.parseIndex(resp.Kvs)
	if err != nil {
		return nil, err
	}
	if locked {
		return nil, fmt.Errorf("failed to snapshot: %w", ErrRestoring)
	}
	rev := resp.Header.Revision
	count, err := s.c.Get(cctx, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
	if err != nil {
		return nil, s.etcdErr("count state keys", err)
	}
	hdr := &SnapshotHeader{Version: 1, Format: etcdFormat, ClusterID: s.clusterID, Index: idx,
		Revision: rev, Created: time.Now().UTC(), Keys: int(count.Count)}
	for _, sec := range secs {
		n, err := s.countSection(cctx, sec, rev)
		if err != nil {
			return nil, err
		}
		hdr.Version = snapshotVersion
		hdr.Sections = append(hdr.Sections, SectionHeader{Name: sec.Name, Keys: n})
	}
	return hdr, nil
}

// opCtx bounds one etcd call by ctx, the store's timeout and Close.
func (s *EtcdStore) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	stop := context.AfterFunc(s.ctx, cancel)
	return cctx, func() { stop(); cancel() }
}

// parseIndex decodes the index key's value; locked reports a restore's
// lock (its index is the one the restore will set).
func (s *EtcdStore) parseIndex(kvs []*mvccpb.KeyValue) (idx uint64, locked bool, err error) {
	if len(kvs) == 0 {
		return 0, false, nil
	}
	v := string(kvs[0].Value)
	if rest, ok := strings.CutPrefix(v, restoreLock); ok {
		v, locked = strings.SplitN(rest, " ", 2)[0], true
	}
	idx, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %sindex is %q", ErrCorrupt, s.prefix, kvs[0].Value)
	}
	return idx, locked, nil
}

// Restore replaces the state with the snapshot r holds, and the sections
// of opts.Sections the snapshot carries (a section it lacks, as every one
// in a version 1 snapshot, is left as it is). It reads and verifies the
// whole stream first (gzip CRC, header, key order and counts, SHA-256,
// cluster ID, each section's keys within its ranges, then each section's
// Prepare): nothing changes unless the snapshot is intact. The cluster ID
// stays this store's: a snapshot of another cluster is refused with
// ErrSnapshotCluster unless opts.Force is set (then its data is adopted
// under this cluster's ID). Then, holding the store's write lock and under
// its leader guard (SetLeader; the caller makes sure it runs on the leader):
//
//   - In one transaction when the etcd server's limits allow it (the
//     embedded member's do: 65536 operations, 32 MiB): readers and the
//     other servers see the old state and sections or the restored ones,
//     never a mix. It is guarded by the index and by every section key
//     not changing since it was planned (else it is planned again).
//   - Otherwise (an external etcd with the default --max-txn-ops 128 or
//     --max-request-bytes 1.5 MiB) in batches. The first replaces the index
//     with a lock, "restoring N (…)": while it is there every server's
//     writes fail and OpenEtcd refuses to start (both report the value),
//     Snapshot fails with ErrRestoring, and readers may see a mix of old and
//     restored keys. Then the state's keys, then each section in ONE
//     transaction of its own (so a section is never half written; one too
//     large for the limits fails the restore), then the index, which
//     unlocks. A restore interrupted midway leaves the lock (and the
//     sections not yet written as they were): run the restore again (it
//     accepts a locked state); until then the cluster cannot write.
//
// Either way the index ends at max(current index, snapshot index) + 1, so
// blocking queries and client agents wake up and reconcile with the
// restored state (allocations the snapshot lacks are stopped, its others
// started). Restored objects keep the modify indexes of the snapshot, so a
// client that already saw a newer change of an allocation it still runs
// keeps that version. Restore holds the whole snapshot in memory.
func (s *EtcdStore) Restore(ctx context.Context, r io.Reader, opts RestoreOptions) error {
	secs, err := s.checkSections(opts.Sections)
	if err != nil {
		return err
	}
	d, err := readSnapshot(r)
	if err != nil {
		return err
	}
	restoring, err := sectionsToRestore(d, secs)
	if err != nil {
		return err
	}
	if d.hdr.ClusterID != s.clusterID && !opts.Force {
		return fmt.Errorf("%w: the snapshot is of cluster %s, this is cluster %s (force the restore to adopt its data)",
			ErrSnapshotCluster, d.hdr.ClusterID, s.clusterID)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var plan *restorePlan
	for try := 0; ; try++ {
		// Another server's write between planning and committing makes
		// the plan stale: plan again.
		if plan, err = s.planRestore(ctx, d, restoring); err != nil {
			return err
		}
		err = s.restoreAtOnce(ctx, plan)
		if !errors.Is(err, ErrConflict) || try == 4 {
			break
		}
	}
	if errors.Is(err, ErrPlanTooLarge) {
		s.logger.Info("snapshot too large for one etcd transaction: restoring in batches", "keys", len(d.kvs))
		err = s.restoreInBatches(ctx, plan)
	}
	if err != nil {
		return err
	}
	s.watch.set(plan.index)
	s.logger.Info("restored a snapshot", "index", plan.index, "keys", len(d.kvs), "snapshot_index", d.hdr.Index,
		"snapshot_cluster_id", d.hdr.ClusterID, "sections", len(restoring))
	return nil
}

// restorePlan is what a restore writes.
type restorePlan struct {
	modRev   int64  // the index's ModRevision when planned (0: absent)
	index    uint64 // the index the restore ends at
	ops      []restoreOp
	sections []*sectionPlan
}

// restoreOp puts key (relative to the prefix), or deletes it.
type restoreOp struct {
	key string
	val []byte
	del bool
}

// restoreOwnKeys are written by Restore itself, never copied.
var restoreOwnKeys = map[string]bool{"index": true, "cluster_id": true}

// planRestore lists the writes turning the live state into the snapshot's:
// every snapshot key, and deletes of the live keys the snapshot lacks; and
// those of each section (planSection).
func (s *EtcdStore) planRestore(ctx context.Context, d *snapshotData, secs []sectionRestore) (*restorePlan, error) {
	p, err := s.planState(ctx, d.hdr, d.kvs)
	if err != nil {
		return nil, err
	}
	for _, sr := range secs {
		sp, err := s.planSection(ctx, sr)
		if err != nil {
			return nil, err
		}
		p.sections = append(p.sections, sp)
	}
	return p, nil
}

// planState plans the state's writes.
func (s *EtcdStore) planState(ctx context.Context, hdr *SnapshotHeader, kvs []kv) (*restorePlan, error) {
	cctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(cctx, s.prefix+"index")
	if err != nil {
		return nil, s.etcdErr("read the index", err)
	}
	cur, _, err := s.parseIndex(resp.Kvs)
	if err != nil {
		return nil, err
	}
	p := &restorePlan{index: max(cur, hdr.Index) + 1}
	if len(resp.Kvs) > 0 {
		p.modRev = resp.Kvs[0].ModRevision
	}
	live, err := s.c.Get(cctx, s.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, s.etcdErr("list state keys", err)
	}
	want := make(map[string]bool, len(kvs))
	for _, e := range kvs {
		if !restoreOwnKeys[e.key] {
			want[e.key] = true
			p.ops = append(p.ops, restoreOp{key: e.key, val: e.val})
		}
	}
	for _, e := range live.Kvs {
		k := strings.TrimPrefix(string(e.Key), s.prefix)
		if !want[k] && !restoreOwnKeys[k] {
			p.ops = append(p.ops, restoreOp{key: k, del: true})
		}
	}
	return p, nil
}

func (s *EtcdStore) etcdOps(ops []restoreOp) []clientv3.Op {
	out := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		if o.del {
			out[i] = clientv3.OpDelete(s.prefix + o.key)
		} else {
			out[i] = clientv3.OpPut(s.prefix+o.key, string(o.val))
		}
	}
	return out
}

// finalOps set the restore's index and keep this store's cluster ID.
func (s *EtcdStore) finalOps(p *restorePlan) []clientv3.Op {
	return []clientv3.Op{clientv3.OpPut(s.prefix+"cluster_id", s.clusterID),
		clientv3.OpPut(s.prefix+"index", strconv.FormatUint(p.index, 10))}
}

// unchanged guards a restore's first transaction: no write since planning.
func (s *EtcdStore) unchanged(p *restorePlan) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(s.prefix+"index"), "=", p.modRev)
}

// restoreAtOnce writes the plan, sections included, in one transaction.
func (s *EtcdStore) restoreAtOnce(ctx context.Context, p *restorePlan) error {
	ops, guards := s.etcdOps(p.ops), []clientv3.Cmp{s.unchanged(p)}
	for _, sp := range p.sections {
		ops, guards = append(ops, sp.ops...), append(guards, sp.guards...)
	}
	ops = append(ops, s.finalOps(p)...)
	return s.commitGuards(ctx, "restore the snapshot", guards, ops)
}

// restoreInBatches locks the state, writes the plan in transactions within
// etcd's default limits, then each section in one transaction, then sets
// the index (which unlocks).
func (s *EtcdStore) restoreInBatches(ctx context.Context, p *restorePlan) error {
	locked, err := s.lockForRestore(ctx, p)
	if err != nil {
		return err
	}
	for rest := p.ops; len(rest) > 0; {
		n, size := 0, 0
		for n < len(rest) && n < restoreBatchOps && (n == 0 || size+len(rest[n].key)+len(rest[n].val) <= restoreBatchBytes) {
			size += len(rest[n].key) + len(rest[n].val)
			n++
		}
		if err := s.commitGuarded(ctx, "restore the snapshot", locked, s.etcdOps(rest[:n])); err != nil {
			return fmt.Errorf("%w: %w", ErrRestoring, err)
		}
		rest = rest[n:]
	}
	for _, sp := range p.sections {
		if err := s.restoreSection(ctx, locked, sp); err != nil {
			return fmt.Errorf("%w: %w", ErrRestoring, err)
		}
	}
	if err := s.commitGuarded(ctx, "finish the restore", locked, s.finalOps(p)); err != nil {
		return fmt.Errorf("%w: %w", ErrRestoring, err)
	}
	return nil
}

// lockForRestore replaces the index with the restore's lock, and returns
// the comparison that holds while the lock does.
func (s *EtcdStore) lockForRestore(ctx context.Context, p *restorePlan) (clientv3.Cmp, error) {
	lock := fmt.Sprintf("%s%d (%s: run the restore again)", restoreLock, p.index, ErrRestoring)
	indexKey := s.prefix + "index"
	err := s.commitGuarded(ctx, "lock the state for a restore", s.unchanged(p),
		[]clientv3.Op{clientv3.OpPut(indexKey, lock)})
	return clientv3.Compare(clientv3.Value(indexKey), "=", lock), err
}

// commitGuarded commits ops if guard and the leader guard (SetLeader) hold:
// ErrNotLeader if the latter failed, ErrConflict if guard did.
func (s *EtcdStore) commitGuarded(ctx context.Context, what string, guard clientv3.Cmp, ops []clientv3.Op) error {
	return s.commitGuards(ctx, what, []clientv3.Cmp{guard}, ops)
}

// commitGuards is commitGuarded with several guards (ErrConflict if any
// failed).
func (s *EtcdStore) commitGuards(ctx context.Context, what string, guards []clientv3.Cmp, ops []clientv3.Op) error {
	cctx, cancel := s.opCtx(ctx)
	defer cancel()
	cmps := slices.Clone(guards)
	var orElse []clientv3.Op
	lkey, lrev, err := s.leader()
	if err != nil {
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	if lkey != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(lkey), "=", lrev))
		orElse = append(orElse, clientv3.OpGet(lkey))
	}
	resp, err := s.c.Txn(cctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		return s.etcdErr(what, err)
	}
	if resp.Succeeded {
		return nil
	}
	if lkey != "" {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != lrev {
			return fmt.Errorf("failed to %s: %w (leader key %s)", what, ErrNotLeader, lkey)
		}
	}
	return fmt.Errorf("failed to %s: %w (the state changed meanwhile)", what, ErrConflict)
}

func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
}
