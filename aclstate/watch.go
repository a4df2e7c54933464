package aclstate

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Backoff of Watch between a failed watch and the next try.
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// Watch reports the ACL index: its current value first (0 when no ACL
// write was ever made), then each new value as writes move it, until ctx
// ends, when the channel is closed. Values coalesce: a reader that falls
// behind sees the newest index, never a stale one after it. A broken etcd
// watch is resumed from a fresh read of the index, which is reported
// when it moved meanwhile, so no move is missed.
func (s *EtcdStore) Watch(ctx context.Context) <-chan uint64 {
	ch := make(chan uint64, 1)
	go func() {
		defer close(ch)
		s.watchLoop(ctx, ch)
	}()
	return ch
}

// watchLoop feeds ch until ctx ends.
func (s *EtcdStore) watchLoop(ctx context.Context, ch chan uint64) {
	backoff := watchBackoffMin
	first := true
	var last uint64
	for ctx.Err() == nil {
		idx, rev, err := s.readIndex(ctx)
		if err == nil {
			if first || idx > last {
				first, last = false, idx
				offer(ch, idx)
			}
			if err = s.watchFrom(ctx, ch, &last, rev+1); err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("ACL index watch failed; retrying", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, watchBackoffMax)
	}
}

// readIndex returns the ACL index and the revision it was read at.
func (s *EtcdStore) readIndex(ctx context.Context) (idx uint64, rev int64, err error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.key(indexKey))
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Kvs) > 0 {
		idx = uint64(resp.Kvs[0].ModRevision)
	}
	return idx, resp.Header.Revision, nil
}

// watchFrom follows the index key from revision rev on, offering each
// index above *last; nil when ctx ended.
func (s *EtcdStore) watchFrom(ctx context.Context, ch chan uint64, last *uint64, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.c.Watch(wctx, s.key(indexKey), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if idx := uint64(ev.Kv.ModRevision); idx > *last {
				*last = idx
				offer(ch, idx)
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errWatchClosed
}

// offer puts idx in ch (capacity 1), replacing an unread older value.
// Only the watch goroutine sends, so the second send never blocks.
func offer(ch chan uint64, idx uint64) {
	select {
	case ch <- idx:
	default:
		select {
		case <-ch:
		default:
		}
		ch <- idx
	}
}

// errWatchClosed: etcd closed a watch without saying why.
var errWatchClosed = errors.New("etcd closed the ACL index watch")
