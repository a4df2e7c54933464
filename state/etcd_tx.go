package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/structs"
)

// maxWriteTries bounds how often a write that lost a race is run again.
const maxWriteTries = 32

// txGetBatch is how many keys one read transaction fetches (the etcd
// default --max-txn-ops is 128).
const txGetBatch = 100

// etcdTx is one call's view of the state: every read happens at the
// revision of the first one, and sees the writes buffered before it.
type etcdTx struct {
	s     *EtcdStore
	ctx   context.Context
	rev   int64             // 0 until the first read
	index uint64            // the write's index (0 in reads)
	seen  map[string][]byte // read at rev; nil value: absent
	buf   map[string]*string
	// gcJobs are alloc_jobs keys that may have lost their last reference.
	gcJobs map[string]struct{}
	// jobRefs memoizes the references of the jobs written (a plan's
	// allocations share one *Job).
	jobRefs map[*structs.Job]string
}

func (s *EtcdStore) newTx(ctx context.Context, rev int64, index uint64) *etcdTx {
	return &etcdTx{s: s, ctx: ctx, rev: rev, index: index, seen: map[string][]byte{},
		buf: map[string]*string{}, gcJobs: map[string]struct{}{}, jobRefs: map[*structs.Job]string{}}
}

// read runs fn on a fresh read-only view (again on a newer one if the
// view's revision was compacted meanwhile).
func (s *EtcdStore) read(fn func(tx *etcdTx) error) error {
	ctx, cancel, err := s.callCtx()
	if err != nil {
		return err
	}
	defer cancel()
	for try := 0; ; try++ {
		err := fn(s.newTx(ctx, 0, 0))
		if try == maxWriteTries || !errors.Is(err, rpctypes.ErrCompacted) {
			return err
		}
	}
}

// write runs fn against the state as of the index's last change, then
// commits its changes and the next index in one transaction, if neither the
// index nor the leader changed meanwhile; otherwise it runs fn again.
// Writes of one store are serialized (as BoltStore's), so only other
// servers' writes can make one run again; it backs off with jitter first.
func (s *EtcdStore) write(what string, fn func(tx *etcdTx) error) (uint64, error) {
	if s.diskCheck != nil {
		if err := s.diskCheck(); err != nil {
			return 0, fmt.Errorf("failed to %s: %w", what, err)
		}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for try := 0; try < maxWriteTries; try++ {
		if try > 0 {
			select {
			case <-s.ctx.Done():
				return 0, ErrClosed
			case <-time.After(rand.N(min(time.Millisecond<<try, 50*time.Millisecond))):
			}
		}
		index, ok, err := s.tryWrite(what, fn)
		if err != nil {
			return 0, err
		}
		if ok {
			s.watch.set(index)
			return index, nil
		}
	}
	return 0, fmt.Errorf("failed to %s: %w after %d tries", what, ErrConflict, maxWriteTries)
}

func (s *EtcdStore) tryWrite(what string, fn func(tx *etcdTx) error) (uint64, bool, error) {
	ctx, cancel, err := s.callCtx()
	if err != nil {
		return 0, false, err
	}
	defer cancel()
	old, modRev, rev, err := s.readIndexRev(ctx)
	if err != nil {
		return 0, false, err
	}
	tx := s.newTx(ctx, rev, old+1)
	err = fn(tx)
	if err == nil {
		err = tx.collectJobs()
	}
	if errors.Is(err, rpctypes.ErrCompacted) {
		return 0, false, nil // read too late: read again
	}
	if err != nil {
		return 0, false, err
	}
	indexKey := s.prefix + "index"
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(indexKey), "=", modRev)}
	var orElse []clientv3.Op
	lkey, lrev, err := s.leader()
	if err != nil {
		return 0, false, fmt.Errorf("failed to %s: %w", what, err)
	}
	if lkey != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(lkey), "=", lrev))
		orElse = append(orElse, clientv3.OpGet(lkey))
	}
	ops := append([]clientv3.Op{clientv3.OpPut(indexKey, strconv.FormatUint(old+1, 10))}, tx.ops()...)
	resp, err := s.c.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		return 0, false, s.etcdErr(what, err)
	}
	if resp.Succeeded {
		return old + 1, true, nil
	}
	if lkey != "" {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != lrev {
			return 0, false, fmt.Errorf("failed to %s: %w (leader key %s)", what, ErrNotLeader, lkey)
		}
	}
	return 0, false, nil
}

// etcdErr wraps an etcd error: ErrClosed after Close, ErrPlanTooLarge for
// the server's request limits.
func (s *EtcdStore) etcdErr(what string, err error) error {
	hint := ""
	switch {
	case s.ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		hint = "raise the etcd server's --max-txn-ops"
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		hint = "raise the etcd server's --max-request-bytes"
	case status.Code(err) == codes.ResourceExhausted:
		hint = "raise the etcd server's --max-request-bytes and the client's MaxCallSendMsgSize"
	default:
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	return fmt.Errorf("failed to %s: %w (%s): %w", what, ErrPlanTooLarge, hint, err)
}

// ops returns the buffered writes, in key order.
func (t *etcdTx) ops() []clientv3.Op {
	keys := make([]string, 0, len(t.buf))
	for k := range t.buf {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ops := make([]clientv3.Op, 0, len(keys))
	for _, k := range keys {
		v := t.buf[k]
		switch {
		case v != nil:
			ops = append(ops, clientv3.OpPut(k, *v))
		case t.known(k) && t.seen[k] == nil:
			// never existed: nothing to delete
		default:
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	return ops
}

func (t *etcdTx) known(key string) bool { _, ok := t.seen[key]; return ok }

func (t *etcdTx) opts(o ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev != 0 {
		o = append(o, clientv3.WithRev(t.rev))
	}
	return o
}

// pin records the revision of the first read.
func (t *etcdTx) pin(rev int64) {
	if t.rev == 0 {
		t.rev = rev
	}
}

// getRaw returns the value of key (nil: absent).
func (t *etcdTx) getRaw(key string) ([]byte, error) {
	if v, ok := t.buf[key]; ok {
		if v == nil {
			return nil, nil
		}
		return []byte(*v), nil
	}
	if v, ok := t.seen[key]; ok {
		return v, nil
	}
	if err := t.prefetch([]string{key}); err != nil {
		return nil, err
	}
	return t.seen[key], nil
}

// prefetch reads the keys not read yet, a batch per transaction.
func (t *etcdTx) prefetch(keys []string) error {
	var todo []string
	queued := map[string]bool{}
	for _, k := range keys {
		if _, ok := t.buf[k]; !ok && !t.known(k) && !queued[k] {
			todo = append(todo, k)
			queued[k] = true
		}
	}
	for len(todo) > 0 {
		n := min(len(todo), txGetBatch)
		batch := todo[:n]
		todo = todo[n:]
		ops := make([]clientv3.Op, len(batch))
		for i, k := range batch {
			ops[i] = clientv3.OpGet(k, t.opts()...)
		}
		resp, err := t.s.c.Txn(t.ctx).Then(ops...).Commit()
		if err != nil {
			return t.s.etcdErr("read state", err)
		}
		t.pin(resp.Header.Revision)
		for i, r := range resp.Responses {
			t.seen[batch[i]] = nil
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				t.seen[batch[i]] = kvs[0].Value
			}
		}
	}
	return nil
}

// kv is one key and value of a scan.
type kv struct {
	key string
	val []byte
}

// scan returns the keys under prefix (with their values unless keysOnly),
// in key order, including the buffered writes.
func (t *etcdTx) scan(prefix string, keysOnly bool) ([]kv, error) {
	o := []clientv3.OpOption{clientv3.WithPrefix()}
	if keysOnly {
		o = append(o, clientv3.WithKeysOnly())
	}
	resp, err := t.s.c.Get(t.ctx, prefix, t.opts(o...)...)
	if err != nil {
		return nil, t.s.etcdErr("read state", err)
	}
	t.pin(resp.Header.Revision)
	out := make([]kv, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		k := string(e.Key)
		if _, ok := t.buf[k]; ok {
			continue
		}
		if !keysOnly {
			t.seen[k] = e.Value
		}
		out = append(out, kv{key: k, val: e.Value})
	}
	for k, v := range t.buf {
		if v != nil && strings.HasPrefix(k, prefix) {
			out = append(out, kv{key: k, val: []byte(*v)})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// scanIDs returns the (unescaped) last path elements of the keys under
// prefix.
func (t *etcdTx) scanIDs(prefix string) ([]string, error) {
	kvs, err := t.scan(prefix, true)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(kvs))
	for _, e := range kvs {
		ids = append(ids, unesc(strings.TrimPrefix(e.key, prefix)))
	}
	return ids, nil
}

func (t *etcdTx) putRaw(key string, val []byte) {
	v := string(val)
	t.buf[key] = &v
}

func (t *etcdTx) put(key string, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode %s: %w", strings.TrimPrefix(key, t.s.prefix), err)
	}
	t.putRaw(key, buf)
	return nil
}

func (t *etcdTx) del(key string) { t.buf[key] = nil }

// etcdGet decodes the value of key; ErrNotFound if absent.
func etcdGet[T any](t *etcdTx, key string) (*T, error) {
	raw, err := t.getRaw(key)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, ErrNotFound
	}
	return decode[T](t.s, key, raw)
}

func decode[T any](s *EtcdStore, key string, raw []byte) (*T, error) {
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("failed to decode %s: %w", strings.TrimPrefix(key, s.prefix), err)
	}
	return out, nil
}

// etcdList decodes every value under prefix, in key order.
func etcdList[T any](t *etcdTx, prefix string) ([]*T, error) {
	kvs, err := t.scan(prefix, false)
	if err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(kvs))
	for _, e := range kvs {
		v, err := decode[T](t.s, e.key, e.val)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// esc makes an ID one path element of a key.
func esc(id string) string { return url.PathEscape(id) }

func unesc(s string) string {
	if id, err := url.PathUnescape(s); err == nil {
		return id
	}
	return s
}

// key joins the prefix and path elements (already escaped).
func (s *EtcdStore) key(parts ...string) string { return s.prefix + strings.Join(parts, "/") }
