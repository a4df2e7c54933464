package intention

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

const (
	fileName    = "intentions.json"
	fileVersion = 1
)

type pairKey struct{ src, dst string }

// persisted is the on-disk shape.
type persisted struct {
	Version    int
	Index      uint64
	Intentions []Intention
}

// Store holds the intentions. See the package doc for concurrency.
type Store struct {
	dir          string
	defaultAllow bool
	logger       hclog.Logger
	now          func() time.Time

	mu      sync.RWMutex
	index   uint64
	sorted  []*Intention // evaluation order
	byID    map[string]*Intention
	byPair  map[pairKey]*Intention
	subs    map[int]func()
	nextSub int
}

// New loads the store from dir (created if missing); dir "" keeps it in
// memory only. defaultAllow is the decision when no intention matches.
func New(dir string, defaultAllow bool, logger hclog.Logger) (*Store, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Store{
		dir:          dir,
		defaultAllow: defaultAllow,
		logger:       logger.Named("intention"),
		now:          func() time.Time { return time.Now().UTC() },
		subs:         map[int]func(){},
	}
	s.install(nil, 0)
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create intentions dir: %w", err)
	}
	list, index, err := load(filepath.Join(dir, fileName))
	if err != nil {
		return nil, err
	}
	s.install(list, index)
	s.logger.Debug("loaded intentions", "count", len(list), "path", filepath.Join(dir, fileName))
	return s, nil
}

func load(path string) ([]*Intention, uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read intentions: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, 0, fmt.Errorf("failed to decode intentions %s: %w", path, err)
	}
	if p.Version != fileVersion {
		return nil, 0, fmt.Errorf("failed to load intentions %s: unsupported version %d", path, p.Version)
	}
	ids, pairs := map[string]bool{}, map[pairKey]bool{}
	list := make([]*Intention, 0, len(p.Intentions))
	for _, in := range p.Intentions {
		ix, err := normalize(in)
		if err != nil {
			return nil, 0, fmt.Errorf("failed to load intention %s: %w", in.ID, err)
		}
		k := pairKey{ix.SourceName, ix.DestinationName}
		if ix.ID == "" || ids[ix.ID] || pairs[k] {
			return nil, 0, fmt.Errorf("failed to load intentions %s: missing or duplicate ID or pair at %s", path, ix)
		}
		ids[ix.ID], pairs[k] = true, true
		list = append(list, &ix)
	}
	return list, p.Index, nil
}

// install replaces the in-memory state; caller holds mu (or owns s).
func (s *Store) install(list []*Intention, index uint64) {
	sortIntentions(list)
	s.sorted, s.index = list, index
	s.byID = make(map[string]*Intention, len(list))
	s.byPair = make(map[pairKey]*Intention, len(list))
	for _, ix := range list {
		s.byID[ix.ID] = ix
		s.byPair[pairKey{ix.SourceName, ix.DestinationName}] = ix
	}
}

// commitLocked persists list at index and installs it; on failure nothing
// changes.
func (s *Store) commitLocked(list []*Intention, index uint64) error {
	if s.dir != "" {
		p := persisted{Version: fileVersion, Index: index, Intentions: make([]Intention, 0, len(list))}
		for _, ix := range list {
			p.Intentions = append(p.Intentions, *ix)
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return fmt.Errorf("failed to encode intentions: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(s.dir, fileName), b); err != nil {
			return fmt.Errorf("failed to persist intentions: %w", err)
		}
	}
	s.install(list, index)
	return nil
}

// Upsert creates the intention for (SourceName, DestinationName), or
// replaces its action and description when it exists and replace is set
// (ErrExists otherwise). The ID is assigned by the store; an ID in `in` must
// match the existing intention's. Invalid input returns ErrInvalid.
func (s *Store) Upsert(in Intention, replace bool) (Intention, error) {
	ix, err := normalize(in)
	if err != nil {
		return Intention{}, err
	}
	s.mu.Lock()
	existing := s.byPair[pairKey{ix.SourceName, ix.DestinationName}]
	switch {
	case existing != nil && !replace:
		s.mu.Unlock()
		return Intention{}, fmt.Errorf("%w: %s => %s", ErrExists, ix.SourceName, ix.DestinationName)
	case ix.ID != "" && (existing == nil || existing.ID != ix.ID):
		s.mu.Unlock()
		return Intention{}, fmt.Errorf("%w: ID %q does not name the intention %s => %s (IDs are assigned by the store)", ErrInvalid, ix.ID, ix.SourceName, ix.DestinationName)
	}
	index, now := s.index+1, s.now()
	ix.UpdatedAt, ix.ModifyIndex = now, index
	if existing != nil {
		ix.ID, ix.CreatedAt, ix.CreateIndex = existing.ID, existing.CreatedAt, existing.CreateIndex
	} else {
		ix.ID, ix.CreatedAt, ix.CreateIndex = uuid.NewString(), now, index
	}
	list := make([]*Intention, 0, len(s.sorted)+1)
	for _, old := range s.sorted {
		if old != existing {
			list = append(list, old)
		}
	}
	list = append(list, &ix)
	if err := s.commitLocked(list, index); err != nil {
		s.mu.Unlock()
		return Intention{}, err
	}
	subs := s.subscribersLocked()
	s.mu.Unlock()
	s.logger.Info("intention saved", "source", ix.SourceName, "destination", ix.DestinationName, "action", ix.Action, "intention_id", ix.ID)
	notify(subs)
	return ix, nil
}

// Delete removes the intention for (src, dst); ErrNotFound if none.
func (s *Store) Delete(src, dst string) error {
	s.mu.Lock()
	ix := s.byPair[pairKey{src, dst}]
	if ix == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %s => %s", ErrNotFound, src, dst)
	}
	return s.deleteLocked(ix)
}

// DeleteByID removes the intention with id; ErrNotFound if none.
func (s *Store) DeleteByID(id string) error {
	s.mu.Lock()
	ix := s.byID[id]
	if ix == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: ID %q", ErrNotFound, id)
	}
	return s.deleteLocked(ix)
}

// deleteLocked removes ix and releases mu.
func (s *Store) deleteLocked(ix *Intention) error {
	list := make([]*Intention, 0, len(s.sorted))
	for _, old := range s.sorted {
		if old != ix {
			list = append(list, old)
		}
	}
	if err := s.commitLocked(list, s.index+1); err != nil {
		s.mu.Unlock()
		return err
	}
	subs := s.subscribersLocked()
	s.mu.Unlock()
	s.logger.Info("intention deleted", "source", ix.SourceName, "destination", ix.DestinationName, "intention_id", ix.ID)
	notify(subs)
	return nil
}

// Get returns the intention for (src, dst).
func (s *Store) Get(src, dst string) (Intention, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ix := s.byPair[pairKey{src, dst}]; ix != nil {
		return *ix, nil
	}
	return Intention{}, fmt.Errorf("%w: %s => %s", ErrNotFound, src, dst)
}

// GetByID returns the intention with id.
func (s *Store) GetByID(id string) (Intention, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ix := s.byID[id]; ix != nil {
		return *ix, nil
	}
	return Intention{}, fmt.Errorf("%w: ID %q", ErrNotFound, id)
}

// List returns every intention in evaluation order: highest precedence
// first, then by source and destination name.
func (s *Store) List() []Intention {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Intention, 0, len(s.sorted))
	for _, ix := range s.sorted {
		out = append(out, *ix)
	}
	return out
}

// Check decides whether src may connect to dst: the first intention in
// precedence order (src→dst, *→dst, src→*, *→*) decides; with none, the
// default policy does and matched is nil.
func (s *Store) Check(src, dst string) (allowed bool, matched *Intention) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, k := range [...]pairKey{{src, dst}, {Wildcard, dst}, {src, Wildcard}, {Wildcard, Wildcard}} {
		if ix := s.byPair[k]; ix != nil {
			cp := *ix
			return cp.Action == ActionAllow, &cp
		}
	}
	return s.defaultAllow, nil
}

// Match returns the intentions that apply to name as a source (by
// "source") or a destination (by "destination"), in evaluation order. An
// unknown by matches nothing.
func (s *Store) Match(by, name string) []Intention {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []Intention{}
	for _, ix := range s.sorted {
		var pattern string
		switch by {
		case "source":
			pattern = ix.SourceName
		case "destination":
			pattern = ix.DestinationName
		default:
			return out
		}
		if matches(pattern, name) {
			out = append(out, *ix)
		}
	}
	return out
}

// DefaultAllow is the decision when no intention matches.
func (s *Store) DefaultAllow() bool { return s.defaultAllow }

// Index increases with every change (X-Consul-Index).
func (s *Store) Index() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.index
}

// Subscribe calls fn after every change until cancel is called.
func (s *Store) Subscribe(fn func()) (cancel func()) {
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

func (s *Store) subscribersLocked() []func() {
	ids := make([]int, 0, len(s.subs))
	for id := range s.subs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]func(), 0, len(ids))
	for _, id := range ids {
		out = append(out, s.subs[id])
	}
	return out
}

func notify(subs []func()) {
	for _, fn := range subs {
		fn()
	}
}
