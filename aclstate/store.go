package aclstate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/acl"
)

// Sentinel errors of EtcdStore besides acl's; test with errors.Is.
var (
	// ErrCorrupt: a stored value does not decode or names another object
	// than its key (the error names the key).
	ErrCorrupt = errors.New("stored ACL object is corrupt")
	// ErrConflict: a write lost the race against other servers' writes
	// too many times in a row.
	ErrConflict = errors.New("ACL state write conflict")
)

// DefaultPrefix is where an EtcdStore keeps its keys by default.
const DefaultPrefix = "/meshlet/acl/"

// DefaultRequestTimeout bounds each etcd call when Options.RequestTimeout
// is zero.
const DefaultRequestTimeout = 10 * time.Second

// Key layout under the prefix (see the package documentation).
const (
	bootstrapKey = "bootstrap"
	policiesDir  = "policies/"
	tokensDir    = "tokens/"
	secretsDir   = "secrets/"
	indexKey     = "index"
)

// maxWriteTries bounds how often a write that lost a race runs again.
const maxWriteTries = 16

// Options tune an EtcdStore; zero fields take their defaults.
type Options struct {
	// Prefix of every key; default DefaultPrefix. A missing trailing "/"
	// is added.
	Prefix string
	// RequestTimeout bounds each etcd call (each try of a retried write);
	// default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger defaults to a null logger; the store logs under "acl_state".
	Logger hclog.Logger
	// Now stamps tokens' CreateTime and decides expiry; default time.Now.
	Now func() time.Time
	// ValidateRules, when set, checks a policy's Rules before it is
	// written (the agent passes acl.Parse's error); its error is wrapped
	// with acl.ErrInvalid. nil writes any rules.
	ValidateRules func(rules string) error
	// DiskCheck, when set, runs before every write; its error fails the
	// write before etcd sees it.
	DiskCheck func() error
	// OnCommit, when set, is called after every committed write, before
	// the write returns: the agent drops its resolver's caches there, so
	// a token deleted through this server is refused by it at once (the
	// other servers follow through Watch).
	OnCommit func()
}

func (opts Options) withDefaults() Options {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return opts
}

// EtcdStore is the servers' ACL state in etcd (see the package
// documentation). It implements acl.Store.
type EtcdStore struct {
	c    *clientv3.Client
	opts Options
	log  hclog.Logger
}

var _ acl.Store = (*EtcdStore)(nil)

// Open returns the store kept under opts.Prefix of the cluster c talks
// to. It does no I/O; the caller owns c and closes it after the last call.
func Open(c *clientv3.Client, opts Options) *EtcdStore {
	opts = opts.withDefaults()
	return &EtcdStore{c: c, opts: opts, log: opts.Logger.Named("acl_state")}
}

// Prefix is the key prefix of the store, ending in "/".
func (s *EtcdStore) Prefix() string { return s.opts.Prefix }

// key is the full key of sub.
func (s *EtcdStore) key(sub string) string { return s.opts.Prefix + sub }

// callCtx bounds one etcd call.
func (s *EtcdStore) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.RequestTimeout)
}

// Index returns the ACL index: the revision of the last ACL write, 0 when
// none was ever made.
func (s *EtcdStore) Index(ctx context.Context) (uint64, error) {
	idx, _, err := s.readIndex(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to read the ACL index: %w", err)
	}
	return idx, nil
}

// state is the keys one write depends on, read at one revision with the
// index key.
type state struct {
	guard int64                         // index key's modify revision, 0: absent
	kvs   map[string]*mvccpb.KeyValue   // by key relative to the prefix
	dirs  map[string][]*mvccpb.KeyValue // keys-only listings, by directory
}

// get is the value of sub, nil when absent.
func (st state) get(sub string) *mvccpb.KeyValue { return st.kvs[sub] }

// read reads the index key, the keys subs and the key names under dirs
// in one transaction.
func (s *EtcdStore) read(ctx context.Context, subs, dirs []string) (state, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	ops := []clientv3.Op{clientv3.OpGet(s.key(indexKey))}
	for _, sub := range subs {
		ops = append(ops, clientv3.OpGet(s.key(sub)))
	}
	for _, d := range dirs {
		ops = append(ops, clientv3.OpGet(s.key(d), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return state{}, err
	}
	st := state{kvs: map[string]*mvccpb.KeyValue{}, dirs: map[string][]*mvccpb.KeyValue{}}
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		switch {
		case i == 0:
			if len(kvs) > 0 {
				st.guard = kvs[0].ModRevision
			}
		case i <= len(subs):
			if len(kvs) > 0 {
				st.kvs[subs[i-1]] = kvs[0]
			}
		default:
			st.dirs[dirs[i-1-len(subs)]] = kvs
		}
	}
	return st, nil
}

// txn is what a write commits: its operations, under its own conditions
// besides the index guard.
type txn struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

// update runs one checked write: plan gets the state of subs and dirs and
// returns the transaction to commit; it commits with the
// index key moved, unless another write moved it since the read, in which
// case the write runs again. It returns the revision of the commit.
func (s *EtcdStore) update(ctx context.Context, what string, subs, dirs []string,
	plan func(state) (txn, error)) (uint64, error) {
	if s.opts.DiskCheck != nil {
		if err := s.opts.DiskCheck(); err != nil {
			return 0, fmt.Errorf("failed to %s: %w", what, err)
		}
	}
	for try := 0; try < maxWriteTries; try++ {
		if !retryWait(ctx, try) {
			return 0, fmt.Errorf("failed to %s: %w", what, ctx.Err())
		}
		st, err := s.read(ctx, subs, dirs)
		if err != nil {
			return 0, fmt.Errorf("failed to %s: %w", what, err)
		}
		t, err := plan(st)
		if err != nil {
			return 0, err
		}
		rev, ok, err := s.commit(ctx, st.guard, what, t)
		if err != nil {
			return 0, fmt.Errorf("failed to %s: %w", what, err)
		}
		if ok {
			return rev, nil
		}
		s.log.Debug("ACL write lost a race; retrying", "try", try+1, "write", what)
	}
	return 0, fmt.Errorf("failed to %s: %w after %d tries", what, ErrConflict, maxWriteTries)
}

// commit applies t and moves the index key unless the index key moved past
// guard or t's own conditions fail; ok is false when they did.
func (s *EtcdStore) commit(ctx context.Context, guard int64, what string, t txn) (uint64, bool, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	ik := s.key(indexKey)
	cmp := clientv3.Compare(clientv3.ModRevision(ik), "=", guard)
	if guard == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(ik), "=", 0)
	}
	ops := append(t.ops[:len(t.ops):len(t.ops)], clientv3.OpPut(ik, what))
	resp, err := s.c.Txn(ctx).If(append([]clientv3.Cmp{cmp}, t.cmps...)...).Then(ops...).Commit()
	if err != nil {
		return 0, false, err
	}
	if resp.Succeeded && s.opts.OnCommit != nil {
		s.opts.OnCommit()
	}
	return uint64(resp.Header.Revision), resp.Succeeded, nil
}

// retryWait sleeps before try (try > 0) of a write that lost a race, with
// jitter so racing writers spread out; false when ctx ended.
func retryWait(ctx context.Context, try int) bool {
	if try == 0 {
		return ctx.Err() == nil
	}
	d := rand.N(min(time.Millisecond<<try, 100*time.Millisecond)) + time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
