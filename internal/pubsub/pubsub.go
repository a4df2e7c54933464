// Package pubsub is the one subscribe/notify mechanism of meshlet's stores
// (catalog, intentions, CA): subscribers register a callback and get every
// published value, in subscription order, on the publishing goroutine.
//
// Callbacks run synchronously and must not block or call back into the
// Hub. A Hub is safe for concurrent use; its zero value is ready.
package pubsub

import "sync"

// Hub fans published values out to its subscribers.
type Hub[T any] struct {
	mu   sync.RWMutex
	next uint64
	subs []sub[T] // in subscription order
}

type sub[T any] struct {
	id uint64
	fn func(T)
}

// Subscribe calls fn with every value published until cancel is called.
// cancel is idempotent.
func (h *Hub[T]) Subscribe(fn func(T)) (cancel func()) {
	h.mu.Lock()
	id := h.next
	h.next++
	h.subs = append(h.subs, sub[T]{id: id, fn: fn})
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for i, s := range h.subs {
				if s.id == id {
					h.subs = append(h.subs[:i:i], h.subs[i+1:]...)
					return
				}
			}
		})
	}
}

// Publish calls every current subscriber with v, outside the Hub's lock.
func (h *Hub[T]) Publish(v T) {
	h.mu.RLock()
	subs := h.subs
	h.mu.RUnlock()
	for _, s := range subs {
		s.fn(v)
	}
}

// Len is the number of current subscribers.
func (h *Hub[T]) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs)
}
