package ca

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Backoff of a prune that failed (storage unreachable, disk full).
const (
	pruneRetryMin = time.Second
	pruneRetryMax = time.Minute
)

// Rotate makes a new root active. The new root is cross-signed by the old
// one (leaves carry the cross-signed certificate, so a peer that still
// trusts only the old root verifies them), both stay trusted, and every
// leaf this manager caches is re-issued in the background under the new
// root (rate limited). The old root is dropped from Roots once
// Config.RootOverlap has passed and no leaf cached here still depends on
// it. Leaves cached elsewhere (another server's, a client agent's, one a
// peer fetched through the API) are not tracked: RootOverlap, by default
// the leaf TTL, is what keeps them verifiable until they were renewed or
// expired. Rotate returns once the new root is active and persisted. When
// another server changed the stored state meanwhile, Rotate fails with an
// error wrapping ErrStateConflict and the manager reloads the stored
// state. In remote mode it fails with ErrRemote.
func (m *Manager) Rotate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("failed to rotate CA root: %w", err)
	}
	if m.remote() {
		return fmt.Errorf("failed to rotate CA root: %w", ErrRemote)
	}
	m.saveMu.Lock()
	prevID, nextID, changed, entries, err := m.rotateLocked(ctx)
	m.saveMu.Unlock()
	if changed {
		m.rootsChanged(entries)
	}
	if err != nil {
		return fmt.Errorf("failed to rotate CA root: %w", err)
	}
	m.metrics.rotations.Inc()
	m.logger.Info("rotated CA root", "root_id", nextID, "previous_root_id", prevID, "leaves", len(entries))
	return nil
}

// rotateLocked builds, saves and applies the rotated state (saveMu held).
func (m *Manager) rotateLocked(ctx context.Context) (prevID, nextID string, changed bool, entries []*leafEntry, err error) {
	m.mu.RLock()
	closed, prev, base, td := m.closed, m.activeLocked(), m.stored, m.trustDomain
	m.mu.RUnlock()
	if closed {
		return "", "", false, nil, ErrClosed
	}
	now := m.now()
	next, err := newRootCA(td, m.cfg.RootTTL, now)
	if err == nil {
		next.crossCert, err = crossSign(prev, next, now)
	}
	var keyPEM string
	if err == nil {
		keyPEM, err = encodeKey(next.key)
	}
	if err != nil {
		return "", "", false, nil, err
	}
	st := cloneState(base)
	st.Index = m.nextIndex(base)
	for i := range st.Roots {
		if sr := &st.Roots[i]; sr.Active {
			sr.Active, sr.RotatedOutAt, sr.ModifyIndex = false, now, st.Index
		}
	}
	next.Active, next.CreateIndex, next.ModifyIndex = true, st.Index, st.Index
	next.IntermediateCertsPEM = []string{encodeCert(next.crossCert)}
	st.Roots = append(st.Roots, StoredRoot{Root: next.Root, PrivateKeyPEM: keyPEM})
	changed, entries, err = m.commit(ctx, st)
	return prev.ID, next.ID, changed, entries, err
}

func (m *Manager) entriesLocked() []*leafEntry {
	out := make([]*leafEntry, 0, len(m.leaves))
	for _, e := range m.leaves {
		out = append(out, e)
	}
	return out
}

// rootsChanged tells subscribers and kicks the renewal of every leaf not
// signed by the active root (or not issued yet). A leaf of the active
// root is kept: a prune only dropped roots it does not chain to.
func (m *Manager) rootsChanged(entries []*leafEntry) {
	m.emit(Event{Kind: EventRootsChanged})
	m.mu.RLock()
	active := m.activeLocked()
	stale := entries[:0:0]
	for _, e := range entries {
		if e.leaf == nil || active == nil || e.rootID != active.ID {
			stale = append(stale, e)
		}
	}
	m.mu.RUnlock()
	for _, e := range stale {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// schedulePruneLocked arms a timer for the earliest moment a rotated-out
// root's overlap ends. Remote mode does not prune: the servers do.
func (m *Manager) schedulePruneLocked() {
	if m.pruneTimer != nil {
		m.pruneTimer.Stop()
		m.pruneTimer = nil
	}
	if m.closed || m.remote() {
		return
	}
	var earliest time.Time
	for _, r := range m.roots {
		if r.Active {
			continue
		}
		at := r.rotatedOutAt.Add(m.cfg.RootOverlap)
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	if earliest.IsZero() {
		return
	}
	m.pruneTimer = time.AfterFunc(max(earliest.Sub(m.now()), 0), m.maybePrune)
}

// prunableLocked lists the rotated-out roots that no cached leaf depends
// on any more and whose overlap has passed, and the roots that have
// expired.
func (m *Manager) prunableLocked() map[string]bool {
	if m.closed || m.remote() {
		return nil
	}
	now := m.now()
	inUse := map[string]bool{}
	for _, e := range m.leaves {
		if e.leaf != nil {
			inUse[e.rootID] = true
		}
	}
	var dropped map[string]bool
	for _, r := range m.roots {
		due := !now.Before(r.rotatedOutAt.Add(m.cfg.RootOverlap)) && !inUse[r.ID]
		if !r.Active && (now.After(r.NotAfter) || due) {
			if dropped == nil {
				dropped = map[string]bool{}
			}
			dropped[r.ID] = true
		}
	}
	return dropped
}

// maybePrune drops the prunable roots from the stored state. Every
// server prunes at the same moment (the same RotatedOutAt): the losers
// get ErrStateConflict, and their reload picks up the winner's result.
// Any other failure is tried again with a backoff, so the old root and its
// key do not stay until some unrelated event.
func (m *Manager) maybePrune() {
	m.mu.RLock()
	due := len(m.prunableLocked()) > 0
	m.mu.RUnlock()
	if !due {
		return
	}
	m.saveMu.Lock()
	dropped, changed, entries, err := m.pruneLocked()
	m.saveMu.Unlock()
	if changed {
		m.rootsChanged(entries)
	}
	switch {
	case err == nil:
		for id := range dropped {
			m.logger.Info("dropped old CA root", "root_id", id)
		}
	case errors.Is(err, ErrStateConflict):
		m.logger.Debug("CA state changed while dropping old roots; reloaded it", "error", err)
	default:
		m.logger.Error("failed to drop old CA roots", "error", err)
	}
	m.retryPrune(err != nil)
}

// pruneLocked commits the state without the prunable roots (saveMu held).
func (m *Manager) pruneLocked() (dropped map[string]bool, changed bool, entries []*leafEntry, err error) {
	m.mu.RLock()
	dropped, base := m.prunableLocked(), m.stored
	m.mu.RUnlock()
	if len(dropped) == 0 {
		return nil, false, nil, nil
	}
	next, err := m.prunedState(base, dropped)
	if err != nil {
		return nil, false, nil, err
	}
	changed, entries, err = m.commit(m.ctx, next)
	return dropped, changed, entries, err
}

// retryPrune arms pruneRetry with a doubled backoff when a prune failed
// and roots are still prunable; otherwise it resets the backoff.
func (m *Manager) retryPrune(failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pruneRetry != nil {
		m.pruneRetry.Stop()
		m.pruneRetry = nil
	}
	if !failed || len(m.prunableLocked()) == 0 {
		m.pruneWait = 0
		return
	}
	m.pruneWait = min(max(2*m.pruneWait, m.pruneRetryMin), max(pruneRetryMax, m.pruneRetryMin))
	m.pruneRetry = time.AfterFunc(m.pruneWait, m.maybePrune)
	m.logger.Debug("will try again to drop old CA roots", "retry_in", m.pruneWait)
}

// prunedState is base without the dropped roots; a kept root's
// cross-signed certificate whose signer is gone is cleared.
func (m *Manager) prunedState(base *StoredState, dropped map[string]bool) (*StoredState, error) {
	next := cloneState(base)
	next.Index = m.nextIndex(base)
	gone := map[string]bool{}
	keep := next.Roots[:0]
	for _, sr := range next.Roots {
		if dropped[sr.ID] {
			gone[sr.SigningKeyID] = true
			continue
		}
		keep = append(keep, sr)
	}
	next.Roots = keep
	for i := range next.Roots {
		sr := &next.Roots[i]
		if len(sr.IntermediateCertsPEM) == 0 {
			continue
		}
		cross, err := parseCertPEM(sr.IntermediateCertsPEM[0])
		if err != nil {
			return nil, fmt.Errorf("failed to parse cross-signed certificate of root %s: %w", sr.ID, err)
		}
		if gone[colonHex(cross.AuthorityKeyId)] {
			sr.IntermediateCertsPEM, sr.ModifyIndex = nil, next.Index
		}
	}
	return next, nil
}
