package state

import (
	"context"
	"sync"
)

// indexWatch publishes the latest index and wakes waiters when it moves:
// each set closes the current channel and installs a fresh one.
type indexWatch struct {
	mu    sync.Mutex
	index uint64
	ch    chan struct{}
}

func newIndexWatch(index uint64) *indexWatch {
	return &indexWatch{index: index, ch: make(chan struct{})}
}

func (w *indexWatch) get() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.index
}

func (w *indexWatch) set(index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index <= w.index {
		return
	}
	w.index = index
	close(w.ch)
	w.ch = make(chan struct{})
}

func (w *indexWatch) wait(ctx context.Context, minIndex uint64) uint64 {
	for {
		w.mu.Lock()
		idx, ch := w.index, w.ch
		w.mu.Unlock()
		if idx > minIndex {
			return idx
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return idx
		}
	}
}
