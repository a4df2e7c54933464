package meshstate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/intention"
)

// Backoff of Follow between a failed watch and the next snapshot.
const (
	followBackoffMin = 100 * time.Millisecond
	followBackoffMax = 5 * time.Second
)

// Snapshot reads the whole state at one revision as a Reset batch: every
// allocation's registrations, the intentions (an empty state when none
// are stored) and the CA's public roots (nil before the CA's first start).
// The keys under ca/keys/ are not even read. A value that does not decode
// is logged and left out of the batch, so that the rest still reaches the
// mirrors: a corrupt allocation value is left out like a deleted one, a
// corrupt intentions or ca/roots value leaves Intentions or Roots nil (the
// mirrors keep the last good one).
func (s *Store) Snapshot(ctx context.Context) (Batch, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	// Two ranges around ca/keys/, read in one transaction: one revision.
	keys := s.key(caKeysDir)
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.prefix, clientv3.WithRange(keys)),
		clientv3.OpGet(rangeEnd(keys), clientv3.WithRange(rangeEnd(s.prefix))),
	).Commit()
	if err != nil {
		return Batch{}, fmt.Errorf("failed to read the mesh state: %w", err)
	}
	b := Batch{Revision: resp.Header.Revision, Reset: true, Intentions: &intention.State{}, Config: &ConfigBatch{}}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			s.applyKV(&b, nil, kv, false)
		}
	}
	return b, nil
}

// applyKV records one key's new value (or deletion) in b; allocIdx maps
// "node/alloc" to its entry in b.Allocs (nil: keys come once, no
// coalescing). A value that does not decode is logged and its part left
// out of b.
func (s *Store) applyKV(b *Batch, allocIdx map[string]int, kv *mvccpb.KeyValue, deleted bool) {
	sub, ok := strings.CutPrefix(string(kv.Key), s.prefix)
	if !ok {
		return
	}
	switch {
	case strings.HasPrefix(sub, catalogDir):
		s.applyAlloc(b, allocIdx, sub, kv, deleted)
	case strings.HasPrefix(sub, configDir):
		applyConfigKV(b, sub, kv, deleted)
	case sub == intentionsKey:
		st := intention.State{}
		if !deleted {
			var err error
			if st, err = s.decodeIntentions(kv.Value); err != nil {
				s.logger.Error("leaving undecodable intentions out of the mesh state feed; agents keep the last good ones",
					"key", string(kv.Key), "error", err)
				b.Intentions = nil
				return
			}
		}
		b.Intentions = &st
	case sub == caRootsKey:
		if deleted {
			s.logger.Warn("CA roots were deleted from etcd; keeping the last ones", "key", string(kv.Key))
			return
		}
		sr, err := s.decodeRoots(kv.Value)
		if err != nil {
			s.logger.Error("leaving undecodable CA roots out of the mesh state feed; agents keep the last good ones",
				"key", string(kv.Key), "error", err)
			b.Roots = nil
			return
		}
		b.Roots = sr.publicRoots()
	}
	// ca/keys/ and unknown keys carry nothing for a mirror.
}

// applyAlloc records one allocation's registrations (sub is the key
// relative to the prefix) in b, as applyKV does.
func (s *Store) applyAlloc(b *Batch, allocIdx map[string]int, sub string, kv *mvccpb.KeyValue, deleted bool) {
	nodeID, allocID, ok := parseAllocKey(strings.TrimPrefix(sub, catalogDir))
	if !ok {
		return
	}
	var insts = AllocRegs{NodeID: nodeID, AllocID: allocID}
	if !deleted {
		var err error
		if insts.Instances, err = decodeInstances(kv.Value); err != nil {
			s.logger.Warn("ignoring undecodable registrations", "key", string(kv.Key), "error", err)
			if allocIdx == nil {
				return // a snapshot leaves it out
			}
		}
	}
	if i, seen := allocIdx[sub]; seen {
		b.Allocs[i] = insts
		return
	}
	if allocIdx != nil {
		allocIdx[sub] = len(b.Allocs)
	}
	b.Allocs = append(b.Allocs, insts)
}

// errFn carries the error of Follow's fn, which ends Follow.
type errFn struct{ err error }

func (e errFn) Error() string { return e.err.Error() }

// Follow calls fn with a Reset batch (Snapshot), then with one batch per
// change of the state, in order, until ctx ends (ctx.Err()) or fn fails
// (fn's error). Each etcd watch response becomes one batch; changes that
// carry nothing for a mirror (private keys) make no batch. When the watch
// fails (the history it needs was compacted, the member lost its leader,
// the connection broke) Follow starts again with a new Reset batch after
// a short backoff; a snapshot that fails (etcd unreachable) is retried
// the same way. A value that does not decode does not stop the feed: it
// is logged and left out (see Snapshot). fn runs on Follow's goroutine;
// while it runs, no batch is read.
func (s *Store) Follow(ctx context.Context, fn func(Batch) error) error {
	backoff := followBackoffMin
	for {
		progressed, err := s.followOnce(ctx, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fe errFn
		if errors.As(err, &fe) {
			return fe.err
		}
		if s.c.Ctx().Err() != nil {
			return fmt.Errorf("failed to follow the mesh state: etcd client closed: %w", err)
		}
		if progressed {
			backoff = followBackoffMin
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			s.logger.Info("mesh state watch fell behind the compacted history; reading it again", "error", err)
		} else {
			s.logger.Warn("mesh state watch failed; reading the state again", "error", err, "backoff", backoff)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, followBackoffMax)
	}
}

// followOnce sends a snapshot, then the changes after it until the watch
// ends; progressed reports whether the snapshot was sent.
func (s *Store) followOnce(ctx context.Context, fn func(Batch) error) (progressed bool, err error) {
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	if err := fn(snap); err != nil {
		return false, errFn{err}
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(snap.Revision+1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return true, fmt.Errorf("mesh state watch ended: %w", err)
		}
		if resp.Canceled {
			return true, errors.New("mesh state watch was cancelled")
		}
		b, ok := s.watchBatch(resp.Events)
		if !ok {
			continue
		}
		if err := fn(b); err != nil {
			return true, errFn{err}
		}
	}
	return true, errors.New("mesh state watch closed")
}

// watchBatch turns one watch response's events into a batch; ok is false
// when they carry nothing for a mirror.
func (s *Store) watchBatch(events []*clientv3.Event) (b Batch, ok bool) {
	if len(events) == 0 {
		return Batch{}, false
	}
	idx := map[string]int{}
	for _, ev := range events {
		s.applyKV(&b, idx, ev.Kv, ev.Type == clientv3.EventTypeDelete)
		b.Revision = ev.Kv.ModRevision
	}
	return b, len(b.Allocs) > 0 || b.Intentions != nil || b.Roots != nil || b.Config != nil
}

// FollowFeed is Follow for a feed relayed to other agents (a server's
// stream to its client agents): it does not wait out a failure of this
// server's etcd (a member that lost its leader, a snapshot that fails, a
// broken connection) but returns it, so that the stream ends and its
// followers move to another server rather than keep stale state behind
// the stream's keepalives. A watch that fell behind the compacted history
// is read again at once (a new Reset batch), as Follow does.
func (s *Store) FollowFeed(ctx context.Context, fn func(Batch) error) error {
	for {
		_, err := s.followOnce(ctx, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fe errFn
		if errors.As(err, &fe) {
			return fe.err
		}
		if !errors.Is(err, rpctypes.ErrCompacted) || s.c.Ctx().Err() != nil {
			return fmt.Errorf("failed to follow the mesh state: %w", err)
		}
		s.logger.Info("mesh state watch fell behind the compacted history; reading it again", "error", err)
	}
}
