package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdStore is the etcd implementation of Store: the state of a cluster of
// servers, kept under one key prefix of an etcd cluster. Values are the same
// JSON as BoltStore's. Under the prefix:
//
//	index                               modify index (decimal)
//	cluster_id, format                  written once
//	jobs/<job>                          latest version
//	job_versions/<job>/<%020d version>  the newest EtcdOptions.JobVersions
//	allocs/<alloc>                      without its Job (see alloc_jobs)
//	alloc_jobs/<job>/<%020d version>/<hash>  the job an allocation runs,
//	                                    once per content, while referenced
//	nodes/<node>, evals/<eval>
//	idx/alloc_node/<node>/<alloc>, idx/alloc_job/<job>/<alloc>,
//	idx/alloc_jobver/<job>/<%020d version>/<hash>/<alloc>,
//	idx/eval_job/<job>/<eval>           empty values, written in the same
//	                                    transactions as what they index
//
// IDs are path-escaped in keys. Every write is one etcd transaction that
// also advances the index, guarded by the index's ModRevision at the time
// the write read the state (optimistic concurrency: a write that lost a
// race to another server reads again and retries; one store's own writes
// are serialized), and by the leader guard while one is set (SetLeader).
// Reads of one call happen at one revision.
//
// Limits: a transaction is bounded by the etcd server's --max-txn-ops
// (default 128) and --max-request-bytes (default 1.5 MiB). A plan costs
// about four operations per allocation, so an external etcd needs
// --max-txn-ops raised for plans placing more than ~30 allocations; a
// write over either limit fails with ErrPlanTooLarge. Allocations do not
// carry copies of their job, so the bytes stay small.
type EtcdStore struct {
	c        *clientv3.Client
	prefix   string
	versions int
	timeout  time.Duration
	logger   hclog.Logger

	clusterID string
	watch     *indexWatch
	jobs      *jobCache

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	writeMu   sync.Mutex // serializes this store's writes
	diskCheck func() error

	mu        sync.Mutex
	leaderKey string
	leaderRev int64
	// deposed: this server led and lost it; its writes fail with
	// ErrNotLeader until it leads again (a plan computed in the lost term
	// must not commit unguarded).
	deposed bool
}

var _ Store = (*EtcdStore)(nil)

// Sentinel errors of EtcdStore.
var (
	// ErrNotLeader: the write's leader guard (SetLeader) no longer holds;
	// nothing was written.
	ErrNotLeader = errors.New("not the leader")
	// ErrConflict: the write lost the race against other servers' writes
	// too many times in a row.
	ErrConflict = errors.New("state write conflict")
	// ErrPlanTooLarge: the write exceeds the etcd server's transaction
	// limits (--max-txn-ops, --max-request-bytes).
	ErrPlanTooLarge = errors.New("state write too large for etcd")
)

// DefaultEtcdPrefix is where EtcdStore keeps its keys by default.
const DefaultEtcdPrefix = "/meshlet/state/"

// etcdFormat is the layout of the keys this code reads and writes.
const etcdFormat = 1

// EtcdOptions tune an EtcdStore; zero fields take their defaults.
type EtcdOptions struct {
	// Prefix of every key; default DefaultEtcdPrefix.
	Prefix string
	// JobVersions is how many versions of each job are kept; default
	// DefaultJobVersions.
	JobVersions int
	// MarkerPath, when set, is a local file recording the cluster ID (as
	// Options.MarkerPath of BoltStore): once it exists, a prefix holding no
	// or another cluster is refused with ErrStateLost.
	MarkerPath string
	// RequestTimeout bounds each etcd call; default 10 s.
	RequestTimeout time.Duration
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// DiskCheck, when set, runs before every write; its error fails the
	// write before etcd sees it. An embedded member cannot survive a full
	// disk (etcd stops the process when a WAL or database write fails), so
	// the agent refuses writes while the member's disk is nearly full.
	DiskCheck func() error
}

// OpenEtcd opens the store kept under opts.Prefix of the cluster c talks
// to, recording a cluster ID if there is none yet. Close stops the store
// but leaves c open (the caller owns it).
func OpenEtcd(ctx context.Context, c *clientv3.Client, opts EtcdOptions) (*EtcdStore, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultEtcdPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.JobVersions <= 0 {
		opts.JobVersions = DefaultJobVersions
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &EtcdStore{c: c, prefix: opts.Prefix, versions: opts.JobVersions, timeout: opts.RequestTimeout,
		logger: opts.Logger.Named("etcd_state"), jobs: newJobCache(), diskCheck: opts.DiskCheck, ctx: sctx, cancel: cancel,
		done: make(chan struct{})}
	if err := s.initialise(ctx, opts.MarkerPath); err != nil {
		cancel()
		return nil, err
	}
	idx, _, err := s.readIndex(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s.watch = newIndexWatch(idx)
	go s.watchIndex()
	return s, nil
}

// initialise compares or records the cluster ID (and the marker).
func (s *EtcdStore) initialise(ctx context.Context, markerPath string) error {
	f := files{db: fmt.Sprintf("etcd prefix %q", s.prefix), marker: markerPath}
	var mark *marker
	if markerPath != "" {
		var err error
		if mark, err = readMarker(f); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	idKey, formatKey := s.prefix+"cluster_id", s.prefix+"format"
	get, err := s.c.Get(ctx, idKey)
	if err != nil {
		return s.etcdErr("read cluster ID", err)
	}
	id := ""
	if len(get.Kvs) > 0 {
		id = string(get.Kvs[0].Value)
	}
	if err := compareClusterID(f, mark, id); err != nil {
		return err
	}
	if id == "" {
		if id, err = s.createClusterID(ctx, idKey, formatKey); err != nil {
			return err
		}
	}
	if err := s.checkFormat(ctx, f, formatKey); err != nil {
		return err
	}
	s.clusterID = id
	if markerPath != "" && mark == nil {
		return writeMarker(markerPath, id)
	}
	return nil
}

// createClusterID records a new cluster ID unless another server was
// first, and returns the stored one.
func (s *EtcdStore) createClusterID(ctx context.Context, idKey, formatKey string) (string, error) {
	id := uuid.NewString()
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(idKey), "=", 0)).
		Then(clientv3.OpPut(idKey, id), clientv3.OpPut(formatKey, strconv.Itoa(etcdFormat))).
		Else(clientv3.OpGet(idKey)).Commit()
	if err != nil {
		return "", s.etcdErr("record cluster ID", err)
	}
	if resp.Succeeded {
		s.logger.Info("recorded a new cluster", "cluster_id", id, "prefix", s.prefix)
		return id, nil
	}
	return string(resp.Responses[0].GetResponseRange().Kvs[0].Value), nil
}

func (s *EtcdStore) checkFormat(ctx context.Context, f files, formatKey string) error {
	resp, err := s.c.Get(ctx, formatKey)
	if err != nil {
		return s.etcdErr("read state format", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	if v, err := strconv.Atoi(string(resp.Kvs[0].Value)); err != nil || v > etcdFormat {
		return fmt.Errorf("%w: %s has format %q, newer than this meshlet's %d", ErrCorrupt, f.db, resp.Kvs[0].Value, etcdFormat)
	}
	return nil
}

// ClusterID implements Store.
func (s *EtcdStore) ClusterID() string { return s.clusterID }

// Index implements Store.
func (s *EtcdStore) Index() uint64 { return s.watch.get() }

// WaitIndex implements Store. It also wakes for writes of other servers.
func (s *EtcdStore) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	return s.watch.wait(ctx, minIndex)
}

// Close implements Store: it stops the index watch. The client stays open.
func (s *EtcdStore) Close() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
	})
	return nil
}

// SetLeader makes every later write also require that key still has
// createRevision (the key and revision of a concurrency.Election this
// server won); a write finding otherwise fails with ErrNotLeader.
func (s *EtcdStore) SetLeader(key string, createRevision int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderKey, s.leaderRev, s.deposed = key, createRevision, false
}

// ClearLeader ends the term SetLeader began: every later write fails with
// ErrNotLeader until the next SetLeader (a deposed leader's plans in flight
// never commit, even though its guard key is gone).
func (s *EtcdStore) ClearLeader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderKey, s.leaderRev, s.deposed = "", 0, true
}

// leader returns the write guard: the election key and its revision, ""
// when writes are unguarded; ErrNotLeader while deposed.
func (s *EtcdStore) leader() (string, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deposed {
		return "", 0, fmt.Errorf("%w: this server lost its leadership", ErrNotLeader)
	}
	return s.leaderKey, s.leaderRev, nil
}

// callCtx bounds one etcd call; it ends at Close too.
func (s *EtcdStore) callCtx() (context.Context, context.CancelFunc, error) {
	if s.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	return ctx, cancel, nil
}

// readIndex returns the stored index, its ModRevision (0: never written)
// and the revision it was read at.
func (s *EtcdStore) readIndex(ctx context.Context) (uint64, int64, error) {
	idx, modRev, _, err := s.readIndexRev(ctx)
	return idx, modRev, err
}

func (s *EtcdStore) readIndexRev(ctx context.Context) (idx uint64, modRev, rev int64, err error) {
	resp, err := s.c.Get(ctx, s.prefix+"index")
	if err != nil {
		return 0, 0, 0, s.etcdErr("read the index", err)
	}
	rev = resp.Header.Revision
	if len(resp.Kvs) == 0 {
		return 0, 0, rev, nil
	}
	idx, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %sindex is %q", ErrCorrupt, s.prefix, resp.Kvs[0].Value)
	}
	return idx, resp.Kvs[0].ModRevision, rev, nil
}

// watchIndex follows the index key so WaitIndex wakes for other servers'
// writes; it restarts after errors (compaction, a lost leader) until Close.
func (s *EtcdStore) watchIndex() {
	defer close(s.done)
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		err := s.watchOnce()
		if s.ctx.Err() != nil {
			return
		}
		s.logger.Debug("index watch restarts", "error", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// watchOnce reads the index, then applies its changes until the watch
// fails.
func (s *EtcdStore) watchOnce() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	idx, _, rev, err := s.readIndexRev(ctx)
	cancel()
	if err != nil {
		return err
	}
	s.watch.set(idx)
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer wcancel()
	for resp := range s.c.Watch(wctx, s.prefix+"index", clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			if v, err := strconv.ParseUint(string(ev.Kv.Value), 10, 64); err == nil {
				s.watch.set(v)
			}
		}
	}
	return errors.New("watch channel closed")
}
