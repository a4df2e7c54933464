package ca

import (
	"errors"
	"fmt"
	"sync"
)

// Leaf cache bookkeeping. An entry is held while something that serves the
// leaf (the xDS server, for each service with a registered proxy or native
// connect instance) keeps a HoldLeaf reference; the last release drops the
// entry and stops its renewal. Entries nobody holds were made by API calls
// (Consul's /v1/agent/connect/ca/leaf/<service>, for any name a caller
// asks): at most Config.MaxAPILeaves of them are cached, the least
// recently used is evicted for a new one, and each is released after
// Config.LeafIdleTTL without a Leaf call. A released entry is never stored
// into or re-signed again (a later Leaf call makes a new one).

// errReleased: the entry was released while a leaf was being signed for it.
var errReleased = errors.New("leaf entry released")

// LeafStats counts the cached leaves.
type LeafStats struct {
	Cached   int // entries (held or not)
	Held     int // entries with HoldLeaf references
	Renewing int // renewal goroutines running
}

// LeafStats returns the current counts.
func (m *Manager) LeafStats() LeafStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return LeafStats{Cached: len(m.leaves), Held: len(m.leaves) - m.unheld, Renewing: int(m.renewers.Load())}
}

// HoldLeaf keeps service's leaf cached and renewed until release is
// called (release is idempotent). References are counted: the entry is
// released when the last one goes. HoldLeaf does not sign; Leaf does.
func (m *Manager) HoldLeaf(service string) (release func(), err error) {
	if !ValidServiceName(service) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidService, service)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e := m.leaves[service]
	switch {
	case e == nil:
		e = m.addEntryLocked(service, 1)
	case e.holds == 0:
		m.unheld--
		e.holds = 1
	default:
		e.holds++
	}
	m.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { m.unhold(e) }) }, nil
}

func (m *Manager) unhold(e *leafEntry) {
	m.mu.Lock()
	if e.released {
		m.mu.Unlock()
		return
	}
	e.holds--
	if e.holds > 0 {
		m.mu.Unlock()
		return
	}
	m.unheld++ // removeLocked counts it out again
	m.removeLocked(e)
	m.mu.Unlock()
	m.logger.Debug("released leaf certificate", "service", e.service)
	m.maybePrune()
}

// addEntryLocked caches a new entry; an API-only one (holds 0) may evict
// the least recently used API-only entry to stay within the cap.
func (m *Manager) addEntryLocked(service string, holds int) *leafEntry {
	if holds == 0 {
		if m.unheld >= m.cfg.MaxAPILeaves {
			m.evictLocked()
		}
		m.unheld++
	}
	e := &leafEntry{
		service: service, holds: holds, lastUsed: m.now(),
		issue: make(chan struct{}, 1), kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	m.leaves[service] = e
	return e
}

func (m *Manager) evictLocked() {
	var victim *leafEntry
	for _, e := range m.leaves {
		if e.holds == 0 && (victim == nil || e.lastUsed.Before(victim.lastUsed)) {
			victim = e
		}
	}
	if victim != nil {
		m.removeLocked(victim)
		m.metrics.evicted.Inc()
		m.logger.Debug("evicted API leaf certificate", "service", victim.service, "max_api_leaves", m.cfg.MaxAPILeaves)
	}
}

// removeLocked drops e from the cache and stops its renewal.
func (m *Manager) removeLocked(e *leafEntry) {
	if e.released {
		return
	}
	e.released = true
	if m.leaves[e.service] == e {
		delete(m.leaves, e.service)
		delete(m.leafDNS, e.service) // its holder (an ingress gateway) is gone
	}
	if e.holds == 0 {
		m.unheld--
	}
	close(e.stop)
}

// live reports whether e is still cached.
func (m *Manager) live(e *leafEntry) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return !e.released
}

// dropUnissued releases an API-only entry whose first issuance failed, so
// failed names do not accumulate.
func (m *Manager) dropUnissued(e *leafEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.leaf == nil && e.holds == 0 && !e.started {
		m.removeLocked(e)
	}
}
