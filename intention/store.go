package intention

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/pubsub"
)

type pairKey struct{ src, dst string }

// snapshot is one immutable version of the intentions. Readers load the
// current one from Store.snap without locking; writers build a new one.
type snapshot struct {
	state  State        // evaluation order; owned by the snapshot, never modified
	sorted []*Intention // pointers into state.Intentions
	byID   map[string]*Intention
	byPair map[pairKey]*Intention
}

// newSnapshot takes ownership of st, whose intentions must be in
// evaluation order and valid.
func newSnapshot(st State) *snapshot {
	sn := &snapshot{
		state:  st,
		sorted: make([]*Intention, len(st.Intentions)),
		byID:   make(map[string]*Intention, len(st.Intentions)),
		byPair: make(map[pairKey]*Intention, len(st.Intentions)),
	}
	for i := range st.Intentions {
		ix := &st.Intentions[i]
		sn.sorted[i] = ix
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

	// writer is set for a mirror (NewMirror): writes go to it, and the
	// content changes only through Replace.
	writer       Writer
	writeTimeout time.Duration // bound of a call to writer
	waitTimeout  time.Duration // bound of the wait for the mirror to see it

	writeMu sync.Mutex // serializes writers, persistence included
	snap    atomic.Pointer[snapshot]
	hub     pubsub.Hub[struct{}]
}

// New loads the store from dir (created if missing); dir "" keeps it in
// memory only. defaultAllow is the decision when no intention matches.
// A directory that held intentions before but lost or corrupted its state
// file is refused (ErrStateMissing, ErrStateCorrupt).
func New(dir string, defaultAllow bool, logger hclog.Logger) (*Store, error) {
	s := newEmptyStore(dir, defaultAllow, logger)
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create intentions dir: %w", err)
	}
	st, err := load(dir)
	if err != nil {
		return nil, err
	}
	s.snap.Store(newSnapshot(st))
	s.logger.Debug("loaded intentions", "count", len(st.Intentions), "path", filepath.Join(dir, fileName))
	return s, nil
}

func newEmptyStore(dir string, defaultAllow bool, logger hclog.Logger) *Store {
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
	s.snap.Store(newSnapshot(State{}))
	return s
}

// commitLocked persists st and makes it current; on failure nothing
// changes. The caller holds writeMu; readers keep reading the previous
// snapshot meanwhile. st is owned by the store afterwards.
func (s *Store) commitLocked(st State) error {
	sn := newSnapshot(st)
	if s.dir != "" {
		if err := s.persist(s.dir, sn.sorted, st.Index); err != nil {
			return err
		}
	}
	s.snap.Store(sn)
	return nil
}

// write applies op to the current state and commits the result, then
// publishes it.
func (s *Store) write(op func(State) (State, Intention, error)) (Intention, error) {
	s.writeMu.Lock()
	next, ix, err := op(s.snap.Load().state)
	if err == nil {
		err = s.commitLocked(next)
	}
	s.writeMu.Unlock()
	if err != nil {
		return Intention{}, err
	}
	s.hub.Publish(struct{}{})
	return ix, nil
}

// Upsert creates the intention for (SourceName, DestinationName), or
// replaces its action and description when it exists and replace is set
// (ErrExists otherwise). The ID is assigned by the store; an ID in `in` must
// match the existing intention's. Invalid input returns ErrInvalid.
// On a mirror the write is made by its Writer (see NewMirror).
func (s *Store) Upsert(in Intention, replace bool) (Intention, error) {
	return s.UpsertCtx(context.Background(), in, replace)
}

// UpsertCtx is Upsert on behalf of ctx's caller: a mirror's write to its
// Writer runs under ctx (which may carry the caller's ACL secret).
func (s *Store) UpsertCtx(ctx context.Context, in Intention, replace bool) (Intention, error) {
	if s.writer != nil {
		return s.mirrorWrite(ctx, func(ctx context.Context) (Intention, uint64, error) {
			return s.writer.Upsert(ctx, in, replace)
		})
	}
	ix, err := s.write(func(st State) (State, Intention, error) { return st.Upsert(in, replace, s.now()) })
	if err != nil {
		return Intention{}, err
	}
	s.logger.Info("intention saved", "source", ix.SourceName, "destination", ix.DestinationName, "action", ix.Action, "intention_id", ix.ID)
	return ix, nil
}

// UpdateByIDCtx replaces the intention with id by in, as State.UpdateByID
// does, on behalf of ctx's caller (see UpsertCtx), if pre allows the
// stored intention; pre is judged on the state the update changes, as
// DeleteByIDCtx judges it.
func (s *Store) UpdateByIDCtx(ctx context.Context, id string, in Intention, pre Precondition) (Intention, error) {
	if s.writer != nil {
		return s.mirrorWrite(ctx, func(ctx context.Context) (Intention, uint64, error) {
			return s.writer.UpdateByID(ctx, id, in, pre)
		})
	}
	ix, err := s.write(func(st State) (State, Intention, error) { return st.UpdateByID(id, in, s.now(), pre) })
	if err != nil {
		return Intention{}, err
	}
	s.logger.Info("intention updated", "source", ix.SourceName, "destination", ix.DestinationName, "action", ix.Action, "intention_id", ix.ID)
	return ix, nil
}

// Delete removes the intention for (src, dst); ErrNotFound if none.
func (s *Store) Delete(src, dst string) error {
	return s.DeleteCtx(context.Background(), src, dst)
}

// DeleteCtx is Delete on behalf of ctx's caller (see UpsertCtx).
func (s *Store) DeleteCtx(ctx context.Context, src, dst string) error {
	if s.writer != nil {
		_, err := s.mirrorWrite(ctx, func(ctx context.Context) (Intention, uint64, error) {
			return s.writer.Delete(ctx, src, dst)
		})
		return err
	}
	return s.delete(func(st State) (State, Intention, error) { return st.Delete(src, dst) })
}

// DeleteByID removes the intention with id; ErrNotFound if none.
func (s *Store) DeleteByID(id string) error {
	return s.DeleteByIDCtx(context.Background(), id, nil)
}

// DeleteByIDCtx is DeleteByID on behalf of ctx's caller (see UpsertCtx),
// made only if pre allows the stored intention: pre is judged on the
// state the delete changes (by the Writer on a mirror), so that a mirror
// that has not seen the intention yet cannot let the delete through
// unjudged.
func (s *Store) DeleteByIDCtx(ctx context.Context, id string, pre Precondition) error {
	if s.writer != nil {
		_, err := s.mirrorWrite(ctx, func(ctx context.Context) (Intention, uint64, error) {
			return s.writer.DeleteByID(ctx, id, pre)
		})
		return err
	}
	return s.delete(func(st State) (State, Intention, error) { return st.DeleteByID(id, pre) })
}

func (s *Store) delete(op func(State) (State, Intention, error)) error {
	ix, err := s.write(op)
	if err != nil {
		return err
	}
	s.logger.Info("intention deleted", "source", ix.SourceName, "destination", ix.DestinationName, "intention_id", ix.ID)
	return nil
}

// State returns a copy of the current state, in evaluation order.
func (s *Store) State() State { return s.snap.Load().state.clone() }

// Replace makes st the store's content: the way a mirror follows the
// cluster. st is validated as DecodeState does (errors wrap
// ErrStateCorrupt and change nothing) and copied. Subscribers are called
// only when the index or the content changed; a store with a dir persists
// the new state first (a failure changes nothing). A state that was
// received from the network must come through Replace.
func (s *Store) Replace(st State) error {
	next, err := validateState(st)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStateCorrupt, err)
	}
	s.writeMu.Lock()
	cur := s.snap.Load().state
	if EqualStates(cur, next) {
		s.writeMu.Unlock()
		return nil
	}
	err = s.commitLocked(next)
	s.writeMu.Unlock()
	if err != nil {
		return err
	}
	if next.Index < cur.Index {
		s.logger.Warn("intentions index went backwards", "index", next.Index, "previous_index", cur.Index)
	}
	s.logger.Debug("intentions replaced", "index", next.Index, "count", len(next.Intentions))
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
// default policy does and matched is nil. An L7 intention (matched.IsL7())
// answers false: only its permissions, request by request (CheckRequest),
// can allow. It never waits for a writer.
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
func (s *Store) Index() uint64 { return s.snap.Load().state.Index }

// Subscribe calls fn after every change until cancel is called.
func (s *Store) Subscribe(fn func()) (cancel func()) {
	return s.hub.Subscribe(func(struct{}) { fn() })
}

// NoPermission is the permission index of a decision no permission made.
const NoPermission = -1

// CheckRequest decides one HTTP request from src to dst: the intention
// that Check would pick decides; when it is an L7 intention, its first
// permission matching req decides (perm is its index), and with none
// matching the default policy does (Consul's semantics).
func (s *Store) CheckRequest(src, dst string, req Request) (allowed bool, matched *Intention, perm int) {
	_, m := s.Check(src, dst)
	if m == nil {
		return s.defaultAllow, nil, NoPermission
	}
	if !m.IsL7() {
		return m.Action == ActionAllow, m, NoPermission
	}
	for i, p := range m.Permissions {
		if p.Matches(req) {
			return p.Action == ActionAllow, m, i
		}
	}
	return s.defaultAllow, m, NoPermission
}
