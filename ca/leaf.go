package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"
)

// maxRenewSleep bounds one wait of a renewal loop. Timers run on the
// monotonic clock, which stands still while the host is suspended (a
// laptop, a paused VM): on resume the loop re-checks the wall clock, the
// one leaves' validity is measured in, within this long.
const maxRenewSleep = 5 * time.Minute

// leafEntry is one service's cached leaf and its renewal goroutine.
type leafEntry struct {
	service string
	issue   chan struct{} // a one-slot semaphore serializing first issuance
	kick    chan struct{} // buffered(1): renew now
	stop    chan struct{} // closed when the entry is released

	// Guarded by Manager.mu.
	leaf     *Leaf
	rootID   string
	issuedAt time.Time
	renewAt  time.Time
	started  bool
	holds    int       // HoldLeaf references; 0: an API-only entry
	lastUsed time.Time // last Leaf call
	released bool      // removed from Manager.leaves; never stored into again
}

// signed is a freshly signed leaf before it is cached.
type signed struct {
	leaf     Leaf
	rootID   string
	issuedAt time.Time
	dns      []string // the extra DNS SANs it was signed with (SetLeafDNS)
}

// renewalTime is the point in [60%, 90%) of a leaf's life, chosen by r in
// [0, 1), at which it is renewed. It is computed from the issue time, not
// the backdated NotBefore.
func renewalTime(issuedAt, expires time.Time, r float64) time.Time {
	if r < 0 || r >= 1 {
		r = 0
	}
	life := expires.Sub(issuedAt)
	return issuedAt.Add(time.Duration(float64(life) * (0.6 + 0.3*r)))
}

// Leaf returns service's leaf certificate, issuing it on the first call.
// The leaf is then renewed in the background (at a random point in
// [60%, 90%] of its life, at once when the roots change) and subscribers
// hear EventLeafRenewed; callers that hold a leaf should re-fetch it then.
// The returned value is a copy.
func (m *Manager) Leaf(ctx context.Context, service string) (*Leaf, error) {
	if !ValidServiceName(service) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidService, service)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e := m.leaves[service]
	if e == nil {
		e = m.addEntryLocked(service, 0)
	}
	e.lastUsed = m.now()
	l := m.usableLocked(e)
	m.mu.Unlock()
	if l != nil {
		return l, nil
	}

	select {
	case e.issue <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("failed to issue leaf for %s: %w", service, ctx.Err())
	}
	defer func() { <-e.issue }()
	m.mu.RLock()
	l = m.usableLocked(e)
	m.mu.RUnlock()
	if l != nil {
		return l, nil
	}
	s, err := m.signAndStore(ctx, e)
	if errors.Is(err, errReleased) { // evicted meanwhile: valid, not cached
		if s == nil {
			s, err = m.sign(ctx, service)
			if err != nil {
				return nil, err
			}
		}
		cp := s.leaf
		return &cp, nil
	}
	if err != nil {
		m.dropUnissued(e)
		return nil, err
	}
	m.mu.Lock()
	if !e.started && !m.closed && !e.released {
		e.started = true
		m.wg.Add(1)
		m.renewers.Add(1)
		go m.renewLoop(e)
	}
	l = m.usableLocked(e)
	m.mu.Unlock()
	m.afterStore(service)
	if l == nil {
		return nil, fmt.Errorf("failed to issue leaf for %s: issued certificate already expired", service)
	}
	return l, nil
}

func (m *Manager) usableLocked(e *leafEntry) *Leaf {
	if e.leaf == nil || !m.now().Before(e.leaf.ValidBefore) {
		return nil
	}
	cp := *e.leaf
	return &cp
}

// signAndStore signs a leaf and caches it in e, retrying when the signing
// root was dropped meanwhile. An entry released meanwhile is not signed
// for (or, signed already, not stored: errReleased with the leaf).
func (m *Manager) signAndStore(ctx context.Context, e *leafEntry) (*signed, error) {
	for attempt := 0; ; attempt++ {
		if !m.live(e) {
			return nil, errReleased
		}
		s, err := m.sign(ctx, e.service)
		if err != nil {
			return nil, err
		}
		err = m.store(e, s)
		if err == nil || !errors.Is(err, errStaleRoot) || attempt == 2 {
			return s, err
		}
	}
}

func (m *Manager) store(e *leafEntry, s *signed) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.released {
		return errReleased
	}
	if m.rootLocked(s.rootID) == nil {
		return fmt.Errorf("failed to store leaf for %s: %w", e.service, errStaleRoot)
	}
	m.index++
	s.leaf.ModifyIndex = m.index
	e.leaf, e.rootID, e.issuedAt = &s.leaf, s.rootID, s.issuedAt
	e.renewAt = renewalTime(s.issuedAt, s.leaf.ValidBefore, m.randFloat())
	if !slices.Equal(s.dns, m.leafDNS[e.service]) {
		// SetLeafDNS changed the names while this leaf was being signed:
		// the renewal loop (woken) issues it again at once.
		e.renewAt = m.now()
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func (m *Manager) afterStore(service string) {
	m.emit(Event{Kind: EventLeafRenewed, Service: service})
	m.maybePrune()
}

// sign waits for the rate limiter and signs a leaf with the active root
// (remote mode: has the cluster's CA sign a CSR).
func (m *Manager) sign(ctx context.Context, service string) (*signed, error) {
	if err := m.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("failed to issue leaf for %s: %w", service, err)
	}
	dns := m.leafDNSFor(service)
	if m.remote() {
		return m.signRemote(ctx, service, dns)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate leaf key: %w", err)
	}
	is, err := m.issue(service, &key.PublicKey, dns)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return newSigned(service, is, keyPEM, dns), nil
}

// nextRenewal is how long e's leaf may live before renewal (zero when it
// is missing, signed by a root that is no longer active, or due), cut
// short by the idle deadline of an API-only entry. ok is false when e is
// released, or was API-only and idle too long: then it is released here.
func (m *Manager) nextRenewal(e *leafEntry) (wait time.Duration, ok bool) {
	m.mu.Lock()
	if e.released {
		m.mu.Unlock()
		return 0, false
	}
	now := m.now().Round(0) // the wall clock: see maxRenewSleep
	if e.holds == 0 && !now.Before(e.lastUsed.Add(m.cfg.LeafIdleTTL)) {
		m.removeLocked(e)
		m.mu.Unlock()
		m.logger.Debug("released idle leaf certificate", "service", e.service)
		m.maybePrune()
		return 0, false
	}
	active := m.activeLocked()
	switch {
	case e.leaf != nil && active != nil && e.rootID == active.ID:
		wait = max(e.renewAt.Sub(now), 0)
	case e.leaf != nil && m.remote():
		// A server that has not seen the rotation yet signed it with the
		// old root: ask again a little later, not in a tight loop.
		wait = max(e.issuedAt.Add(m.remoteStaleRetry).Sub(now), 0)
	}
	if e.holds == 0 && wait > 0 {
		wait = min(wait, e.lastUsed.Add(m.cfg.LeafIdleTTL).Sub(now))
	}
	m.mu.Unlock()
	return wait, true
}

// renewLoop renews e's leaf until Close or e is released.
func (m *Manager) renewLoop(e *leafEntry) {
	defer m.wg.Done()
	defer m.renewers.Add(-1)
	backoff := time.Second
	for {
		wait, ok := m.nextRenewal(e)
		if !ok {
			return
		}
		if wait > 0 {
			t := time.NewTimer(min(wait, m.maxRenewSleep))
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-e.stop:
				t.Stop()
				return
			case <-t.C:
				continue // due, or idle: nextRenewal decides
			case <-e.kick:
				t.Stop()
			}
		}
		select {
		case <-e.kick: // this renewal serves a pending kick too
		default:
		}
		_, err := m.signAndStore(m.ctx, e)
		if err == nil {
			backoff = time.Second
			m.afterStore(e.service)
			continue
		}
		if errors.Is(err, errReleased) || m.ctx.Err() != nil {
			return
		}
		m.logger.Error("failed to renew leaf certificate", "service", e.service, "error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-e.stop:
			t.Stop()
			return
		case <-t.C:
		case <-e.kick:
			// New roots (SetRoots, Reload, Rotate): a leaf the old ones
			// could not accept may be signed now.
			t.Stop()
		}
		backoff = min(2*backoff, time.Minute)
	}
}
