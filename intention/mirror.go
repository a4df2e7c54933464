package intention

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of a mirror's write: the call to its Writer, then the wait until
// the mirror has seen the state the write produced.
const (
	mirrorWriteTimeout = 10 * time.Second
	mirrorWaitTimeout  = 5 * time.Second
)

// NewMirror returns an in-memory store that follows the cluster: its
// content changes only through Replace (fed by the cluster's state), and
// its Upsert, Delete and DeleteByID send the write to w, then wait until
// the store has seen the state the write produced (Index() reaches the
// index w returned), so that a caller reads its own write. That wait is
// bounded: after 5 s the write's result is returned anyway (the write was
// made) and a warning is logged. Errors from w are returned unchanged:
// Writers must preserve ErrExists, ErrNotFound and ErrInvalid.
// Reads (Check, Match, Get, List) are local and never wait for the cluster.
func NewMirror(w Writer, defaultAllow bool, logger hclog.Logger) *Store {
	s := newEmptyStore("", defaultAllow, logger)
	s.writer = w
	s.writeTimeout, s.waitTimeout = mirrorWriteTimeout, mirrorWaitTimeout
	return s
}

// mirrorWrite makes a write through the Writer and waits until the mirror
// has seen it. The call runs under parent's values and cancellation,
// bounded by the write timeout.
func (s *Store) mirrorWrite(parent context.Context, call func(context.Context) (Intention, uint64, error)) (Intention, error) {
	ctx, cancel := context.WithTimeout(parent, s.writeTimeout)
	ix, index, err := call(ctx)
	cancel()
	if err != nil {
		return Intention{}, err
	}
	s.waitIndex(index)
	return ix, nil
}

// waitIndex returns once the store's index is at least index, or after
// waitTimeout (logging a warning).
func (s *Store) waitIndex(index uint64) {
	if s.Index() >= index {
		return
	}
	changed := make(chan struct{}, 1)
	unsubscribe := s.hub.Subscribe(func(struct{}) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()
	timer := time.NewTimer(s.waitTimeout)
	defer timer.Stop()
	for s.Index() < index {
		select {
		case <-changed:
		case <-timer.C:
			s.logger.Warn("intention write was made but this agent has not seen it yet",
				"index", index, "local_index", s.Index(), "timeout", s.waitTimeout)
			return
		}
	}
}
