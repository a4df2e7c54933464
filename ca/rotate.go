package ca

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Rotate makes a new root active. The new root is cross-signed by the old
// one (leaves carry the cross-signed certificate, so a peer that still
// trusts only the old root verifies them), both stay trusted, and every
// cached leaf is re-issued in the background under the new root (rate
// limited). The old root is dropped from Roots only once every cached leaf
// has been re-issued and Config.RootOverlap has passed, so no live or new
// connection between old-leaf and new-leaf peers breaks. Rotate returns
// once the new root is active and persisted.
func (m *Manager) Rotate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("failed to rotate CA root: %w", err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	prev := m.activeLocked()
	now := m.now()
	next, err := newRootCA(m.trustDomain, m.cfg.RootTTL, now)
	if err == nil {
		next.crossCert, err = crossSign(prev, next, now)
	}
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("failed to rotate CA root: %w", err)
	}
	next.IntermediateCertsPEM = []string{encodeCert(next.crossCert)}
	prevModify := prev.ModifyIndex
	m.index++
	next.Active, next.CreateIndex, next.ModifyIndex = true, m.index, m.index
	prev.Active, prev.rotatedOutAt, prev.ModifyIndex = false, now, m.index
	m.roots = append(m.roots, next)
	if err := m.persistLocked(); err != nil {
		m.roots = m.roots[:len(m.roots)-1]
		prev.Active, prev.rotatedOutAt, prev.ModifyIndex = true, time.Time{}, prevModify
		m.index-- // saveState removed next's key file unless the state got out
		m.mu.Unlock()
		return fmt.Errorf("failed to rotate CA root: %w", err)
	}
	m.rebuildPoolLocked()
	m.schedulePruneLocked()
	entries := m.entriesLocked()
	m.mu.Unlock()

	m.metrics.rotations.Inc()
	m.logger.Info("rotated CA root", "root_id", next.ID, "previous_root_id", prev.ID, "leaves", len(entries))
	m.rootsChanged(entries)
	return nil
}

func (m *Manager) entriesLocked() []*leafEntry {
	out := make([]*leafEntry, 0, len(m.leaves))
	for _, e := range m.leaves {
		out = append(out, e)
	}
	return out
}

// rootsChanged tells subscribers and kicks every leaf's renewal.
func (m *Manager) rootsChanged(entries []*leafEntry) {
	m.emit(Event{Kind: EventRootsChanged})
	for _, e := range entries {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// schedulePruneLocked arms a timer for the earliest moment a rotated-out
// root's overlap ends.
func (m *Manager) schedulePruneLocked() {
	if m.pruneTimer != nil {
		m.pruneTimer.Stop()
		m.pruneTimer = nil
	}
	if m.closed {
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

// maybePrune drops rotated-out roots that no cached leaf depends on any
// more and whose overlap has passed, and roots that have expired.
func (m *Manager) maybePrune() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	now := m.now()
	inUse := map[string]bool{}
	for _, e := range m.leaves {
		if e.leaf != nil {
			inUse[e.rootID] = true
		}
	}
	var keep, dropped []*rootCA
	for _, r := range m.roots {
		due := !now.Before(r.rotatedOutAt.Add(m.cfg.RootOverlap)) && !inUse[r.ID]
		if !r.Active && (now.After(r.NotAfter) || due) {
			dropped = append(dropped, r)
			continue
		}
		keep = append(keep, r)
	}
	if len(dropped) == 0 {
		m.mu.Unlock()
		return
	}
	if err := m.applyDropLocked(keep, dropped); err != nil {
		m.mu.Unlock()
		m.logger.Error("failed to drop old CA roots", "error", err)
		return
	}
	entries := m.entriesLocked()
	m.mu.Unlock()
	for _, r := range dropped {
		m.logger.Info("dropped old CA root", "root_id", r.ID)
	}
	m.rootsChanged(entries)
}

// applyDropLocked replaces the roots with keep, clears cross-signed
// certificates whose signer is gone, and persists; on failure nothing
// changes.
func (m *Manager) applyDropLocked(keep, dropped []*rootCA) error {
	oldRoots := m.roots
	type saved struct {
		r     *rootCA
		pems  []string
		cross *x509.Certificate
	}
	var cleared []saved
	gone := map[string]bool{}
	for _, r := range dropped {
		gone[r.SigningKeyID] = true
	}
	m.index++
	for _, r := range keep {
		if r.crossCert != nil && gone[colonHex(r.crossCert.AuthorityKeyId)] {
			cleared = append(cleared, saved{r, r.IntermediateCertsPEM, r.crossCert})
			r.crossCert, r.IntermediateCertsPEM, r.ModifyIndex = nil, nil, m.index
		}
	}
	m.roots = keep
	if err := m.persistLocked(); err != nil {
		m.roots = oldRoots
		m.index--
		for _, s := range cleared {
			s.r.IntermediateCertsPEM, s.r.crossCert = s.pems, s.cross
		}
		return err
	}
	m.removeKeyFiles(dropped)
	m.rebuildPoolLocked()
	m.schedulePruneLocked()
	return nil
}

// dropExpiredLocked forgets roots (active or not) that have expired; used at
// load time before a missing active root is replaced.
func (m *Manager) dropExpiredLocked(now time.Time) []*rootCA {
	var keep, dropped []*rootCA
	for _, r := range m.roots {
		if now.After(r.NotAfter) {
			dropped = append(dropped, r)
			continue
		}
		keep = append(keep, r)
	}
	m.roots = keep
	return dropped
}

func (m *Manager) removeKeyFiles(roots []*rootCA) {
	if m.cfg.Dir == "" {
		return
	}
	for _, r := range roots {
		if r.keyFile == "" {
			continue
		}
		path := filepath.Join(m.cfg.Dir, r.keyFile)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			m.logger.Warn("failed to remove old root key", "path", path, "error", err)
		}
	}
}
