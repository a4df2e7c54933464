package state

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	snapshotVersion = 1
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
}

type snapshotEntry struct {
	K string `json:"k"`
	V []byte `json:"v"`
}

// snapshotLine is an entry or the trailer, as read back.
type snapshotLine struct {
	K   *string `json:"k"`
	V   []byte  `json:"v"`
	Sum *string `json:"sha256"`
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force restores a snapshot of another cluster.
	Force bool
}

// Snapshot writes a logical snapshot of the state to w: a copy of every key
// under the store's prefix, read at one etcd revision, so it is consistent
// while servers write and works the same with the embedded member and with
// an external etcd (whose own `etcdctl snapshot` copies the whole cluster
// instead). It fails if that revision is compacted before the last page is
// read, and while a restore holds its lock (ErrRestoring). The stream is
// gzip of JSON lines:
//
//	{"meshlet_snapshot":1,"format":1,"cluster_id":…,"index":…,"revision":…,"created":…,"keys":N}
//	{"k":"jobs/web","v":"<base64>"}      N lines, keys relative to the prefix, in key order
//	{"sha256":"<hex>"}                   of every uncompressed byte before this line
func (s *EtcdStore) Snapshot(ctx context.Context, w io.Writer) error {
	hdr, err := s.snapshotHeader(ctx)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(w)
	sum := sha256.New()
	enc := json.NewEncoder(io.MultiWriter(zw, sum))
	if err := enc.Encode(hdr); err != nil {
		return fmt.Errorf("failed to write snapshot: %w", err)
	}
	n := 0
	end := clientv3.GetPrefixRangeEnd(s.prefix)
	for from := s.prefix; ; {
		cctx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(cctx, from, clientv3.WithRange(end), clientv3.WithRev(hdr.Revision),
			clientv3.WithLimit(snapshotPage))
		cancel()
		if err != nil {
			return s.etcdErr("read state for a snapshot", err)
		}
		for _, e := range resp.Kvs {
			if err := enc.Encode(snapshotEntry{K: strings.TrimPrefix(string(e.Key), s.prefix), V: e.Value}); err != nil {
				return fmt.Errorf("failed to write snapshot: %w", err)
			}
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if n != hdr.Keys {
		return fmt.Errorf("failed to snapshot: read %d keys at revision %d, counted %d", n, hdr.Revision, hdr.Keys)
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

// snapshotHeader reads the index and counts the keys, at one revision.
func (s *EtcdStore) snapshotHeader(ctx context.Context) (*SnapshotHeader, error) {
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
	return &SnapshotHeader{Version: snapshotVersion, Format: etcdFormat, ClusterID: s.clusterID, Index: idx,
		Revision: rev, Created: time.Now().UTC(), Keys: int(count.Count)}, nil
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

// Restore replaces the state with the snapshot r holds. It reads and
// verifies the whole stream first (gzip CRC, header, key order and count,
// SHA-256, cluster ID): nothing changes unless the snapshot is intact. The
// cluster ID stays this store's: a snapshot of another cluster is refused
// with ErrSnapshotCluster unless opts.Force is set (then its data is adopted
// under this cluster's ID). Then, holding the store's write lock and under
// its leader guard (SetLeader; the caller makes sure it runs on the leader):
//
//   - In one transaction when the etcd server's limits allow it (the
//     embedded member's do: 65536 operations, 32 MiB): readers and the
//     other servers see the old state or the restored one, never a mix.
//   - Otherwise (an external etcd with the default --max-txn-ops 128 or
//     --max-request-bytes 1.5 MiB) in batches. The first replaces the index
//     with a lock, "restoring N (…)": while it is there every server's
//     writes fail and OpenEtcd refuses to start (both report the value),
//     Snapshot fails with ErrRestoring, and readers may see a mix of old and
//     restored keys. The last batch sets the index, which unlocks. A restore
//     interrupted midway leaves the lock: run the restore again (it accepts
//     a locked state); until then the cluster cannot write.
//
// Either way the index ends at max(current index, snapshot index) + 1, so
// blocking queries and client agents wake up and reconcile with the
// restored state (allocations the snapshot lacks are stopped, its others
// started). Restored objects keep the modify indexes of the snapshot, so a
// client that already saw a newer change of an allocation it still runs
// keeps that version. Restore holds the whole snapshot in memory.
func (s *EtcdStore) Restore(ctx context.Context, r io.Reader, opts RestoreOptions) error {
	hdr, kvs, err := readSnapshot(r)
	if err != nil {
		return err
	}
	if hdr.ClusterID != s.clusterID && !opts.Force {
		return fmt.Errorf("%w: the snapshot is of cluster %s, this is cluster %s (force the restore to adopt its data)",
			ErrSnapshotCluster, hdr.ClusterID, s.clusterID)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var plan *restorePlan
	for try := 0; ; try++ {
		// Another server's write between planning and committing makes
		// the plan stale: plan again.
		if plan, err = s.planRestore(ctx, hdr, kvs); err != nil {
			return err
		}
		err = s.restoreAtOnce(ctx, plan)
		if !errors.Is(err, ErrConflict) || try == 4 {
			break
		}
	}
	if errors.Is(err, ErrPlanTooLarge) {
		s.logger.Info("snapshot too large for one etcd transaction: restoring in batches", "keys", len(kvs))
		err = s.restoreInBatches(ctx, plan)
	}
	if err != nil {
		return err
	}
	s.watch.set(plan.index)
	s.logger.Info("restored a snapshot", "index", plan.index, "keys", len(kvs), "snapshot_index", hdr.Index,
		"snapshot_cluster_id", hdr.ClusterID)
	return nil
}

// restorePlan is what a restore writes.
type restorePlan struct {
	modRev int64  // the index's ModRevision when planned (0: absent)
	index  uint64 // the index the restore ends at
	ops    []restoreOp
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
// every snapshot key, and deletes of the live keys the snapshot lacks.
func (s *EtcdStore) planRestore(ctx context.Context, hdr *SnapshotHeader, kvs []kv) (*restorePlan, error) {
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

// restoreAtOnce writes the plan in one transaction.
func (s *EtcdStore) restoreAtOnce(ctx context.Context, p *restorePlan) error {
	ops := append(s.etcdOps(p.ops), s.finalOps(p)...)
	return s.commitGuarded(ctx, "restore the snapshot", s.unchanged(p), ops)
}

// restoreInBatches locks the state, writes the plan in transactions within
// etcd's default limits, then sets the index (which unlocks).
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
	cctx, cancel := s.opCtx(ctx)
	defer cancel()
	cmps := []clientv3.Cmp{guard}
	var orElse []clientv3.Op
	lkey, lrev := s.leader()
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

// readSnapshot reads and verifies a whole snapshot.
func readSnapshot(r io.Reader) (*SnapshotHeader, []kv, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, badSnapshot("not a gzip stream: %w", err)
	}
	br := bufio.NewReaderSize(&capReader{r: zr, left: maxSnapshotBytes}, 64<<10)
	sum := sha256.New()
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, nil, badSnapshot("no header: %w", err)
	}
	sum.Write(line)
	hdr := new(SnapshotHeader)
	if err := json.Unmarshal(line, hdr); err != nil || hdr.Version == 0 || hdr.ClusterID == "" {
		return nil, nil, badSnapshot("no meshlet snapshot header")
	}
	if hdr.Version > snapshotVersion || hdr.Format > etcdFormat {
		return nil, nil, badSnapshot("snapshot version %d, state format %d: newer than this meshlet reads (%d, %d)",
			hdr.Version, hdr.Format, snapshotVersion, etcdFormat)
	}
	kvs, trailer, err := readEntries(br, sum)
	if err != nil {
		return nil, nil, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != trailer {
		return nil, nil, badSnapshot("checksum mismatch: the snapshot says %s, its content is %s", trailer, got)
	}
	if len(kvs) != hdr.Keys {
		return nil, nil, badSnapshot("%d keys, the header says %d", len(kvs), hdr.Keys)
	}
	// Reading to the end also checks the gzip CRC.
	switch _, err := br.ReadByte(); {
	case err == nil:
		return nil, nil, badSnapshot("data after the trailer")
	case !errors.Is(err, io.EOF):
		return nil, nil, badSnapshot("%w", err)
	}
	return hdr, kvs, nil
}

// readEntries reads the key lines (adding them to sum) up to the trailer,
// and returns the trailer's checksum.
func readEntries(br *bufio.Reader, sum io.Writer) ([]kv, string, error) {
	var kvs []kv
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return nil, "", badSnapshot("truncated after %d keys: %w", len(kvs), err)
		}
		var l snapshotLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, "", badSnapshot("line %d: %w", len(kvs)+2, err)
		}
		switch {
		case l.Sum != nil:
			return kvs, *l.Sum, nil
		case l.K == nil || *l.K == "":
			return nil, "", badSnapshot("line %d has no key", len(kvs)+2)
		case len(kvs) > 0 && *l.K <= kvs[len(kvs)-1].key:
			return nil, "", badSnapshot("key %q out of order", *l.K)
		}
		_, _ = sum.Write(line)
		kvs = append(kvs, kv{key: *l.K, val: l.V})
	}
}

// capReader fails once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, badSnapshot("larger than %d bytes uncompressed", int64(maxSnapshotBytes))
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
