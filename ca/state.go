package ca

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// The CA's state lives in a StoredState (the source of truth, persisted
// through Config.Storage); Manager.roots is its parsed form. Every change
// (first start, rotation, prune) computes the next StoredState from the
// last one loaded or saved, saves it with compare-and-swap and only then
// applies it. Manager.saveMu serializes those changes; readers only take
// Manager.mu.

// maxLoadAttempts bounds the load/save retries at start when other servers
// keep changing the stored state.
const maxLoadAttempts = 5

// cloneState deep-copies st (Revision included).
func cloneState(st *StoredState) *StoredState {
	out := *st
	out.Roots = make([]StoredRoot, len(st.Roots))
	for i, sr := range st.Roots {
		sr.IntermediateCertsPEM = append([]string(nil), sr.IntermediateCertsPEM...)
		out.Roots[i] = sr
	}
	return &out
}

// initialState is what a start makes of the stored state st (nil: nothing
// stored): expired roots dropped and, when no active root remains (or
// none ever existed), a new active root. changed is false when st can be
// used as it is.
func (m *Manager) initialState(st *StoredState) (next *StoredState, changed bool, err error) {
	now := m.now()
	if st == nil {
		id := m.cfg.ClusterID
		if id == "" {
			id = uuid.NewString()
		}
		next, changed = &StoredState{ClusterID: id}, true
	} else {
		if m.cfg.ClusterID != "" && m.cfg.ClusterID != st.ClusterID {
			return nil, false, fmt.Errorf("failed to load CA state: cluster ID %s differs from the persisted %s", m.cfg.ClusterID, st.ClusterID)
		}
		next = cloneState(st)
	}
	keep := next.Roots[:0]
	active := false
	for _, sr := range next.Roots {
		if now.After(sr.NotAfter) {
			changed = true
			continue
		}
		active = active || sr.Active
		keep = append(keep, sr)
	}
	next.Roots = keep
	if active {
		return next, changed, nil
	}
	r, err := newRootCA(TrustDomainOf(next.ClusterID), m.cfg.RootTTL, now)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err := encodeKey(r.key)
	if err != nil {
		return nil, false, err
	}
	next.Index++
	for i := range next.Roots {
		if next.Roots[i].RotatedOutAt.IsZero() {
			next.Roots[i].RotatedOutAt = now
		}
	}
	r.Active, r.CreateIndex, r.ModifyIndex = true, next.Index, next.Index
	next.Roots = append(next.Roots, StoredRoot{Root: r.Root, PrivateKeyPEM: keyPEM})
	return next, true, nil
}

// load restores or initializes the state. On a conflict (another server
// created or changed it meanwhile) it loads again and uses what is stored.
func (m *Manager) load(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		var st *StoredState
		if m.storage != nil {
			var err error
			if st, err = m.storage.Load(ctx); err != nil {
				return fmt.Errorf("failed to load CA state: %w", err)
			}
		}
		next, changed, err := m.initialState(st)
		if err != nil {
			return err
		}
		roots, err := parseStoredRoots(next)
		if err != nil {
			if ds, ok := m.storage.(*dirStorage); ok {
				return fmt.Errorf("failed to load CA state: %w: restore %s from a backup", err, ds.dir)
			}
			return fmt.Errorf("failed to load CA state: %w", err)
		}
		if changed {
			err = m.save(ctx, st, next)
			if errors.Is(err, ErrStateConflict) && attempt < maxLoadAttempts {
				m.logger.Debug("CA state changed while starting, loading again", "attempt", attempt)
				continue
			}
			if err != nil {
				return err
			}
		}
		m.apply(next, roots)
		created := st == nil || storedActiveID(st) != activeID(roots)
		m.logger.Info("CA ready", "roots", len(roots), "created_root", created, "trust_domain", m.TrustDomain())
		return nil
	}
}

// save stores next in place of prev (no storage: nothing to do).
func (m *Manager) save(ctx context.Context, prev, next *StoredState) error {
	if m.storage == nil {
		return nil
	}
	if err := m.storage.Save(ctx, prev, next); err != nil {
		return fmt.Errorf("failed to persist CA state: %w", err)
	}
	return nil
}

// apply makes st (parsed as roots) the current state. It returns whether
// the roots changed (their IDs or the active root) and, if so, the cached
// leaf entries to re-issue.
func (m *Manager) apply(st *StoredState, roots []*rootCA) (changed bool, entries []*leafEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed = rootsDiffer(m.roots, roots)
	m.stored, m.roots = st, roots
	m.clusterID, m.trustDomain = st.ClusterID, TrustDomainOf(st.ClusterID)
	if changed {
		m.index = max(m.index+1, st.Index)
		m.rootsIndex = m.index
		m.rebuildPoolLocked()
		m.schedulePruneLocked()
		entries = m.entriesLocked()
	}
	return changed, entries
}

// rootsDiffer reports whether a and b differ in their root IDs or active root.
func rootsDiffer(a, b []*rootCA) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Active != b[i].Active {
			return true
		}
	}
	return false
}

// Reload re-reads the stored state (another server rotated or pruned the
// roots). When the roots changed it swaps them, emits EventRootsChanged
// and re-issues the cached leaves as a rotation does; otherwise it only
// remembers the stored revision. Without storage it does nothing; in
// remote mode it fails with ErrRemote (roots arrive through SetRoots).
func (m *Manager) Reload(ctx context.Context) error {
	if m.remote() {
		return fmt.Errorf("failed to reload CA state: %w", ErrRemote)
	}
	m.saveMu.Lock()
	changed, entries, err := m.reloadLocked(ctx)
	m.saveMu.Unlock()
	if err != nil {
		return err
	}
	if changed {
		m.rootsChanged(entries)
	}
	return nil
}

// reloadLocked does Reload's work with saveMu held; the caller calls
// rootsChanged(entries) after releasing it when changed.
func (m *Manager) reloadLocked(ctx context.Context) (changed bool, entries []*leafEntry, err error) {
	if m.isClosed() {
		return false, nil, ErrClosed
	}
	if m.storage == nil {
		return false, nil, nil
	}
	st, err := m.storage.Load(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("failed to reload CA state: %w", err)
	}
	if st == nil {
		return false, nil, fmt.Errorf("failed to reload CA state: %w: nothing is stored any more", ErrStateMissing)
	}
	if cur := m.ClusterID(); st.ClusterID != cur {
		return false, nil, fmt.Errorf("failed to reload CA state: %w: cluster ID %s differs from %s", ErrStateCorrupt, st.ClusterID, cur)
	}
	roots, err := parseStoredRoots(st)
	if err != nil {
		return false, nil, fmt.Errorf("failed to reload CA state: %w", err)
	}
	changed, entries = m.apply(st, roots)
	if changed {
		m.logger.Info("reloaded CA roots", "roots", len(roots), "active_root_id", activeID(roots))
	}
	return changed, entries, nil
}

// commit saves next in place of the last state and applies it. On
// ErrStateConflict the manager reloads; the error wraps ErrStateConflict
// and the reload's outcome is returned for the caller to announce.
func (m *Manager) commit(ctx context.Context, next *StoredState) (changed bool, entries []*leafEntry, err error) {
	roots, err := parseStoredRoots(next)
	if err != nil {
		return false, nil, err
	}
	m.mu.RLock()
	prev := m.stored
	m.mu.RUnlock()
	if err := m.save(ctx, prev, next); err != nil {
		if !errors.Is(err, ErrStateConflict) {
			return false, nil, err
		}
		changed, entries, rerr := m.reloadLocked(ctx)
		if rerr != nil {
			m.logger.Error("failed to reload CA state after a conflict", "error", rerr)
		}
		return changed, entries, err
	}
	changed, entries = m.apply(next, roots)
	return changed, entries, nil
}

func activeID(roots []*rootCA) string {
	for _, r := range roots {
		if r.Active {
			return r.ID
		}
	}
	return ""
}

func storedActiveID(st *StoredState) string {
	for _, sr := range st.Roots {
		if sr.Active {
			return sr.ID
		}
	}
	return ""
}

func (m *Manager) isClosed() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.closed
}

// nextIndex is the Index of a state derived from base.
func (m *Manager) nextIndex(base *StoredState) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return max(base.Index, m.index) + 1
}
