package intention

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/pubsub"
)

type pairKey struct{ src, dst string }

// snapshot is one immutable version of the intentions. Readers load the
// current one from Store.snap without locking; writers build a new one.
type snapshot struct {
	index  uint64
	sorted []*Intention // evaluation order
	byID   map[string]*Intention
	byPair map[pairKey]*Intention
}

func newSnapshot(list []*Intention, index uint64) *snapshot {
	sortIntentions(list)
	sn := &snapshot{
		index: index, sorted: list,
		byID:   make(map[string]*Intention, len(list)),
		byPair: make(map[pairKey]*Intention, len(list)),
	}
	for _, ix := range list {
		sn.byID[ix.ID] = ix
		sn.byPair[pairKey{ix.SourceName, ix.DestinationName}] = ix
	}
	return sn
}

// Store holds the intentions. See the package doc for concurrency.
type Store struct {
	dir          string
	defaultAllow bool
	logger       hclog.Logger
	now          func() time.Time
	// persist writes a new state to dir; a test hook (default save).
	persist func(dir string, list []*Intention, index uint64) error

	writeMu sync.Mutex // serializes writers, persistence included
	snap    atomic.Pointer[snapshot]
	hub     pubsub.Hub[struct{}]
}

// New loads the store from dir (created if missing); dir "" keeps it in
// memory only. defaultAllow is the decision when no intention matches.
// A directory that held intentions before but lost or corrupted its state
// file is refused (ErrStateMissing, ErrStateCorrupt).
func New(dir string, defaultAllow bool, logger hclog.Logger) (*Store, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Store{
		dir:          dir,
		defaultAllow: defaultAllow,
		logger:       logger.Named("intention"),
		now:          func() time.Time { return time.Now().UTC() },
		persist:      save,
	}
	s.snap.Store(newSnapshot(nil, 0))
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create intentions dir: %w", err)
	}
	list, index, err := load(dir)
	if err != nil {
		return nil, err
	}
	s.snap.Store(newSnapshot(list, index))
	s.logger.Debug("loaded intentions", "count", len(list), "path", filepath.Join(dir, fileName))
	return s, nil
}

// commitLocked persists list at index and publishes it; on failure
// nothing changes. The caller holds writeMu; readers keep reading the
// previous snapshot meanwhile.
func (s *Store) commitLocked(list []*Intention, index uint64) error {
	sn := newSnapshot(list, index)
	if s.dir != "" {
		if err := s.persist(s.dir, sn.sorted, index); err != nil {
			return err
		}
	}
	s.snap.Store(sn)
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
	s.writeMu.Lock()
	cur := s.snap.Load()
	existing := cur.byPair[pairKey{ix.SourceName, ix.DestinationName}]
	switch {
	case existing != nil && !replace:
		s.writeMu.Unlock()
		return Intention{}, fmt.Errorf("%w: %s => %s", ErrExists, ix.SourceName, ix.DestinationName)
	case ix.ID != "" && (existing == nil || existing.ID != ix.ID):
		s.writeMu.Unlock()
		return Intention{}, fmt.Errorf("%w: ID %q does not name the intention %s => %s (IDs are assigned by the store)", ErrInvalid, ix.ID, ix.SourceName, ix.DestinationName)
	}
	index, now := cur.index+1, s.now()
	ix.UpdatedAt, ix.ModifyIndex = now, index
	if existing != nil {
		ix.ID, ix.CreatedAt, ix.CreateIndex = existing.ID, existing.CreatedAt, existing.CreateIndex
	} else {
		ix.ID, ix.CreatedAt, ix.CreateIndex = uuid.NewString(), now, index
	}
	list := make([]*Intention, 0, len(cur.sorted)+1)
	for _, old := range cur.sorted {
		if old != existing {
			list = append(list, old)
		}
	}
	list = append(list, &ix)
	err = s.commitLocked(list, index)
	s.writeMu.Unlock()
	if err != nil {
		return Intention{}, err
	}
	s.logger.Info("intention saved", "source", ix.SourceName, "destination", ix.DestinationName, "action", ix.Action, "intention_id", ix.ID)
	s.hub.Publish(struct{}{})
	return ix, nil
}

// Delete removes the intention for (src, dst); ErrNotFound if none.
func (s *Store) Delete(src, dst string) error {
	return s.delete(func(sn *snapshot) (*Intention, error) {
		if ix := sn.byPair[pairKey{src, dst}]; ix != nil {
			return ix, nil
		}
		return nil, fmt.Errorf("%w: %s => %s", ErrNotFound, src, dst)
	})
}

// DeleteByID removes the intention with id; ErrNotFound if none.
func (s *Store) DeleteByID(id string) error {
	return s.delete(func(sn *snapshot) (*Intention, error) {
		if ix := sn.byID[id]; ix != nil {
			return ix, nil
		}
		return nil, fmt.Errorf("%w: ID %q", ErrNotFound, id)
	})
}

// delete removes the intention find picks from the current snapshot.
func (s *Store) delete(find func(*snapshot) (*Intention, error)) error {
	s.writeMu.Lock()
	cur := s.snap.Load()
	ix, err := find(cur)
	if err == nil {
		list := make([]*Intention, 0, len(cur.sorted))
		for _, old := range cur.sorted {
			if old != ix {
				list = append(list, old)
			}
		}
		err = s.commitLocked(list, cur.index+1)
	}
	s.writeMu.Unlock()
	if err != nil {
		return err
	}
	s.logger.Info("intention deleted", "source", ix.SourceName, "destination", ix.DestinationName, "intention_id", ix.ID)
	s.hub.Publish(struct{}{})
	return nil
}

// Get returns the intention for (src, dst).
func (s *Store) Get(src, dst string) (Intention, error) {
	if ix := s.snap.Load().byPair[pairKey{src, dst}]; ix != nil {
		return *ix, nil
	}
	return Intention{}, fmt.Errorf("%w: %s => %s", ErrNotFound, src, dst)
}

// GetByID returns the intention with id.
func (s *Store) GetByID(id string) (Intention, error) {
	if ix := s.snap.Load().byID[id]; ix != nil {
		return *ix, nil
	}
	return Intention{}, fmt.Errorf("%w: ID %q", ErrNotFound, id)
}

// List returns every intention in evaluation order: highest precedence
// first, then by source and destination name.
func (s *Store) List() []Intention {
	sn := s.snap.Load()
	out := make([]Intention, 0, len(sn.sorted))
	for _, ix := range sn.sorted {
		out = append(out, *ix)
	}
	return out
}

// Check decides whether src may connect to dst: the first intention in
// precedence order (src→dst, *→dst, src→*, *→*) decides; with none, the
// default policy does and matched is nil. It never waits for a writer.
func (s *Store) Check(src, dst string) (allowed bool, matched *Intention) {
	sn := s.snap.Load()
	for _, k := range [...]pairKey{{src, dst}, {Wildcard, dst}, {src, Wildcard}, {Wildcard, Wildcard}} {
		if ix := sn.byPair[k]; ix != nil {
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
	out := []Intention{}
	for _, ix := range s.snap.Load().sorted {
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
func (s *Store) Index() uint64 { return s.snap.Load().index }

// Subscribe calls fn after every change until cancel is called.
func (s *Store) Subscribe(fn func()) (cancel func()) {
	return s.hub.Subscribe(func(struct{}) { fn() })
}
