package configentry

import (
	"sync"

	"github.com/meshlet/meshlet/internal/pubsub"
)

// Registry holds the current Set and tells subscribers when it changes.
// The agent feeds it (from the servers' state); the xDS server reads it.
type Registry struct {
	mu    sync.RWMutex
	set   *Set
	index uint64
	hub   pubsub.Hub[uint64]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{set: NewSet()} }

// Current returns the current set and the index it was stored at.
func (r *Registry) Current() (*Set, uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.set, r.index
}

// Replace installs a new set (treat it as immutable afterwards) and
// notifies subscribers with its index.
func (r *Registry) Replace(s *Set, index uint64) {
	if s == nil {
		s = NewSet()
	}
	r.mu.Lock()
	r.set, r.index = s, index
	r.mu.Unlock()
	r.hub.Publish(index)
}

// Subscribe calls fn after every Replace; fn must not block.
func (r *Registry) Subscribe(fn func(index uint64)) (cancel func()) {
	return r.hub.Subscribe(fn)
}
