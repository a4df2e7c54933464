package meshstate

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/intention"
)

// Intentions returns the writer of the cluster's intentions: each call
// reads the stored state, applies the operation (intention.State's
// methods, stamped with Options.Now) and writes the result with a
// compare-and-swap on the key's revision, reading again and retrying when
// another writer was first (ErrConflict after too many tries). The
// operation's own errors (intention.ErrExists, ErrNotFound, ErrInvalid)
// are returned unchanged.
func (s *Store) Intentions() intention.Writer { return intentionWriter{s: s} }

type intentionWriter struct{ s *Store }

var _ intention.Writer = intentionWriter{}

// intentionOp is one operation on a version of the intentions.
type intentionOp func(st intention.State) (intention.State, intention.Intention, error)

func (w intentionWriter) Upsert(ctx context.Context, in intention.Intention, replace bool) (intention.Intention, uint64, error) {
	return w.s.updateIntentions(ctx, "upsert intention", func(st intention.State) (intention.State, intention.Intention, error) {
		return st.Upsert(in, replace, w.s.now())
	})
}

func (w intentionWriter) Delete(ctx context.Context, src, dst string) (intention.Intention, uint64, error) {
	return w.s.updateIntentions(ctx, "delete intention", func(st intention.State) (intention.State, intention.Intention, error) {
		return st.Delete(src, dst)
	})
}

// DeleteByID judges pre on the state it read, in the same
// compare-and-swap as the delete.
func (w intentionWriter) DeleteByID(ctx context.Context, id string, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.s.updateIntentions(ctx, "delete intention", func(st intention.State) (intention.State, intention.Intention, error) {
		return st.DeleteByID(id, pre)
	})
}

// UpdateByID judges pre on the state it read, in the same
// compare-and-swap as the update.
func (w intentionWriter) UpdateByID(ctx context.Context, id string, in intention.Intention, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.s.updateIntentions(ctx, "update intention", func(st intention.State) (intention.State, intention.Intention, error) {
		return st.UpdateByID(id, in, w.s.now(), pre)
	})
}

// updateIntentions runs op on the stored state and stores its result if
// nobody wrote the key meanwhile; otherwise it runs op again on the newer
// state.
func (s *Store) updateIntentions(ctx context.Context, what string, op intentionOp) (intention.Intention, uint64, error) {
	if err := s.writable(what); err != nil {
		return intention.Intention{}, 0, err
	}
	for try := 0; try < maxWriteTries; try++ {
		if !retryWait(ctx, try) {
			return intention.Intention{}, 0, fmt.Errorf("failed to %s: %w", what, ctx.Err())
		}
		ix, index, ok, err := s.tryUpdateIntentions(ctx, what, op)
		if err != nil || ok {
			return ix, index, err
		}
		s.logger.Debug("intentions write lost a race; retrying", "try", try+1)
	}
	return intention.Intention{}, 0, fmt.Errorf("failed to %s: %w after %d tries", what, ErrConflict, maxWriteTries)
}

// tryUpdateIntentions is one read, op and compare-and-swap; ok is false
// when the key changed since the read.
func (s *Store) tryUpdateIntentions(ctx context.Context, what string, op intentionOp) (intention.Intention, uint64, bool, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	key := s.key(intentionsKey)
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return intention.Intention{}, 0, false, fmt.Errorf("failed to %s: failed to read intentions: %w", what, err)
	}
	var st intention.State
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if len(resp.Kvs) > 0 {
		if st, err = s.decodeIntentions(resp.Kvs[0].Value); err != nil {
			return intention.Intention{}, 0, false, fmt.Errorf("failed to %s: %w", what, err)
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
	}
	next, ix, err := op(st)
	if err != nil {
		return intention.Intention{}, 0, false, err
	}
	b, err := intention.EncodeState(next)
	if err != nil {
		return intention.Intention{}, 0, false, fmt.Errorf("failed to %s: %w", what, err)
	}
	txn, err := s.c.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return intention.Intention{}, 0, false, fmt.Errorf("failed to %s: failed to write intentions: %w", what, err)
	}
	return ix, next.Index, txn.Succeeded, nil
}

// LoadIntentions returns the stored intentions; found is false (and the
// state empty) when none were ever stored.
func (s *Store) LoadIntentions(ctx context.Context) (st intention.State, found bool, err error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.key(intentionsKey))
	if err != nil {
		return intention.State{}, false, fmt.Errorf("failed to read intentions: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return intention.State{}, false, nil
	}
	st, err = s.decodeIntentions(resp.Kvs[0].Value)
	return st, err == nil, err
}

// ImportIntentions stores st as the cluster's intentions unless some are
// stored already (a one-time migration of a server's on-disk intentions);
// created reports whether st was written.
func (s *Store) ImportIntentions(ctx context.Context, st intention.State) (created bool, err error) {
	if err := s.writable("import intentions"); err != nil {
		return false, err
	}
	b, err := intention.EncodeState(st)
	if err != nil {
		return false, fmt.Errorf("failed to import intentions: %w", err)
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	key := s.key(intentionsKey)
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return false, fmt.Errorf("failed to import intentions: %w", err)
	}
	return resp.Succeeded, nil
}

// decodeIntentions decodes the intentions key's value; an error wraps
// intention.ErrStateCorrupt (as DecodeState's do) and names the key.
func (s *Store) decodeIntentions(b []byte) (intention.State, error) {
	st, err := intention.DecodeState(b)
	if err != nil {
		return intention.State{}, fmt.Errorf("etcd key %s: %w", s.key(intentionsKey), err)
	}
	return st, nil
}
