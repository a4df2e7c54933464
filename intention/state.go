package intention

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/google/uuid"
)

// State is one version of the intentions as stored in the cluster (one
// etcd value) or streamed to a client agent: the index and every
// intention.
//
// Its methods are pure: they never modify the receiver (nor its slice) and
// return a new State, with the next Index (see nextIndex) and the intentions in
// evaluation order, together with the intention written or removed. On
// error they return the receiver unchanged, so a caller that assigns the
// result cannot lose the state.
type State struct {
	Index      uint64
	Intentions []Intention
}

// Writer is where a mirror Store (NewMirror) sends its writes: the
// cluster's servers. Each returns the index of the state it produced, so
// the mirror can wait until it has seen that state.
//
// Implementations must preserve the sentinel errors: when the servers
// rejected the write because the pair exists, the intention is unknown or
// the input is invalid, the error must satisfy errors.Is with ErrExists,
// ErrNotFound or ErrInvalid respectively (the HTTP API maps them to status
// codes). Mirror stores return Writer errors unchanged.
//
// A write by ID takes a Precondition, which the Writer must judge on the
// state the write changes (inside its compare-and-swap), not on a copy
// that may lag. A Writer that forwards to the servers does not send pre:
// the servers judge the caller's ACL token, which ctx carries, by the
// same rule on their own state.
type Writer interface {
	Upsert(ctx context.Context, in Intention, replace bool) (Intention, uint64, error)
	Delete(ctx context.Context, src, dst string) (Intention, uint64, error)
	DeleteByID(ctx context.Context, id string, pre Precondition) (Intention, uint64, error)
	UpdateByID(ctx context.Context, id string, in Intention, pre Precondition) (Intention, uint64, error)
}

// Precondition judges the stored intention that a write by ID is about to
// change; its error fails the write, unchanged, and nothing is written.
// nil allows every write.
type Precondition func(stored Intention) error

// Upsert creates the intention for (SourceName, DestinationName), or
// replaces its action and description when it exists and replace is set
// (ErrExists otherwise), as Store.Upsert does. A new intention gets a new
// ID; an ID in `in` must match the existing intention's (ErrInvalid
// otherwise). UpdatedAt (and CreatedAt for a new one) is now; ModifyIndex
// (and CreateIndex for a new one) is the new state's index.
func (st State) Upsert(in Intention, replace bool, now time.Time) (State, Intention, error) {
	ix, err := normalize(in)
	if err != nil {
		return st, Intention{}, err
	}
	i := st.find(func(x *Intention) bool {
		return x.SourceName == ix.SourceName && x.DestinationName == ix.DestinationName
	})
	switch {
	case i >= 0 && !replace:
		return st, Intention{}, fmt.Errorf("%w: %s => %s", ErrExists, ix.SourceName, ix.DestinationName)
	case ix.ID != "" && (i < 0 || st.Intentions[i].ID != ix.ID):
		return st, Intention{}, fmt.Errorf("%w: ID %q does not name the intention %s => %s (IDs are assigned by the store)", ErrInvalid, ix.ID, ix.SourceName, ix.DestinationName)
	}
	index := st.nextIndex()
	ix.UpdatedAt, ix.ModifyIndex = now, index
	if i >= 0 {
		old := st.Intentions[i]
		ix.ID, ix.CreatedAt, ix.CreateIndex = old.ID, old.CreatedAt, old.CreateIndex
	} else {
		ix.ID, ix.CreatedAt, ix.CreateIndex = uuid.NewString(), now, index
	}
	list := st.without(i, 1)
	list = append(list, ix)
	sortValues(list)
	return State{Index: index, Intentions: list}, ix, nil
}

// UpdateByID replaces the intention with id by in, if pre allows the
// stored one (Consul's legacy update): the source, action, description and
// permissions may change, the destination may not (ErrInvalid), and a
// source whose pair another intention holds is ErrExists. The ID and
// creation stamps are kept; an ID in `in` must be id or empty. ErrNotFound
// if there is no intention with id (before pre is asked).
func (st State) UpdateByID(id string, in Intention, now time.Time, pre Precondition) (State, Intention, error) {
	i, err := st.findID(id, pre)
	if err != nil {
		return st, Intention{}, err
	}
	ix, err := normalize(in)
	if err != nil {
		return st, Intention{}, err
	}
	old := st.Intentions[i]
	switch {
	case ix.ID != "" && ix.ID != id:
		return st, Intention{}, fmt.Errorf("%w: ID %q in the body differs from the updated intention's %q", ErrInvalid, ix.ID, id)
	case ix.DestinationNS != old.DestinationNS || ix.DestinationName != old.DestinationName:
		return st, Intention{}, fmt.Errorf("%w: the destination of an intention cannot change (%s => %s is stored, not => %s)", ErrInvalid, old.SourceName, old.DestinationName, ix.DestinationName)
	}
	if j := st.find(func(x *Intention) bool {
		return x.ID != id && x.SourceName == ix.SourceName && x.DestinationName == ix.DestinationName
	}); j >= 0 {
		return st, Intention{}, fmt.Errorf("%w: %s => %s", ErrExists, ix.SourceName, ix.DestinationName)
	}
	index := st.nextIndex()
	ix.ID, ix.CreatedAt, ix.CreateIndex = old.ID, old.CreatedAt, old.CreateIndex
	ix.UpdatedAt, ix.ModifyIndex = now, index
	list := st.without(i, 1)
	list = append(list, ix)
	sortValues(list)
	return State{Index: index, Intentions: list}, ix, nil
}

// Delete removes the intention for (src, dst); ErrNotFound if none.
func (st State) Delete(src, dst string) (State, Intention, error) {
	i := st.find(func(x *Intention) bool { return x.SourceName == src && x.DestinationName == dst })
	if i < 0 {
		return st, Intention{}, fmt.Errorf("%w: %s => %s", ErrNotFound, src, dst)
	}
	return st.remove(i)
}

// DeleteByID removes the intention with id if pre allows it; ErrNotFound
// if none (before pre is asked).
func (st State) DeleteByID(id string, pre Precondition) (State, Intention, error) {
	i, err := st.findID(id, pre)
	if err != nil {
		return st, Intention{}, err
	}
	return st.remove(i)
}

// findID returns the position of the intention with id once pre allowed
// it; ErrNotFound if none.
func (st State) findID(id string, pre Precondition) (int, error) {
	i := st.find(func(x *Intention) bool { return x.ID == id })
	if i < 0 {
		return -1, fmt.Errorf("%w: ID %q", ErrNotFound, id)
	}
	if pre != nil {
		if err := pre(st.Intentions[i]); err != nil {
			return -1, err
		}
	}
	return i, nil
}

// remove drops the intention at i; the rest stays in evaluation order.
func (st State) remove(i int) (State, Intention, error) {
	removed := st.Intentions[i]
	return State{Index: st.nextIndex(), Intentions: st.without(i, 0)}, removed, nil
}

// find returns the position of the first intention match accepts, or -1.
func (st State) find(match func(*Intention) bool) int {
	for i := range st.Intentions {
		if match(&st.Intentions[i]) {
			return i
		}
	}
	return -1
}

// without returns a new slice of st's intentions except the one at skip
// (none when skip < 0), with room for extra more.
func (st State) without(skip, extra int) []Intention {
	out := make([]Intention, 0, len(st.Intentions)+extra)
	for i, ix := range st.Intentions {
		if i != skip {
			out = append(out, ix)
		}
	}
	return out
}

// clone returns a deep copy of st (the slice is new).
func (st State) clone() State {
	return State{Index: st.Index, Intentions: append([]Intention(nil), st.Intentions...)}
}

func sortValues(list []Intention) {
	sort.Slice(list, func(i, j int) bool { return less(&list[i], &list[j]) })
}

// validateState normalizes every intention of st into a new slice, in
// evaluation order, and checks that each has an ID and that IDs and
// (source, destination) pairs are unique.
func validateState(st State) (State, error) {
	ids, pairs := map[string]bool{}, map[pairKey]bool{}
	list := make([]Intention, 0, len(st.Intentions))
	for _, in := range st.Intentions {
		ix, err := normalize(in)
		if err != nil {
			return State{}, fmt.Errorf("intention %s: %w", in.ID, err)
		}
		k := pairKey{ix.SourceName, ix.DestinationName}
		if ix.ID == "" || ids[ix.ID] || pairs[k] {
			return State{}, fmt.Errorf("missing or duplicate ID or pair at %s", ix)
		}
		ids[ix.ID], pairs[k] = true, true
		list = append(list, ix)
	}
	sortValues(list)
	return State{Index: st.Index, Intentions: list}, nil
}

// EncodeState renders st as compact JSON (the value of the cluster's
// intentions key).
func EncodeState(st State) ([]byte, error) {
	if st.Intentions == nil {
		st.Intentions = []Intention{}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("failed to encode intentions: %w", err)
	}
	return b, nil
}

// DecodeState parses and validates what EncodeState produced, as a state
// file is validated: every intention valid, IDs and pairs unique. Errors
// wrap ErrStateCorrupt. The intentions are returned in evaluation order.
func DecodeState(b []byte) (State, error) {
	if t := bytes.TrimSpace(b); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return State{}, fmt.Errorf("%w: empty value", ErrStateCorrupt)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrStateCorrupt, err)
	}
	st, err := validateState(st)
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrStateCorrupt, err)
	}
	return st, nil
}

// EqualStates reports whether a and b hold the same index and intentions
// (times compared as instants). Both must be in evaluation order, as
// DecodeState and State's methods return them.
func EqualStates(a, b State) bool {
	if a.Index != b.Index || len(a.Intentions) != len(b.Intentions) {
		return false
	}
	for i := range a.Intentions {
		x, y := a.Intentions[i], b.Intentions[i]
		if !x.CreatedAt.Equal(y.CreatedAt) || !x.UpdatedAt.Equal(y.UpdatedAt) {
			return false
		}
		if !equalPermissions(x.Permissions, y.Permissions) {
			return false
		}
		x.CreatedAt, x.UpdatedAt, y.CreatedAt, y.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		x.Permissions, y.Permissions = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// equalPermissions compares permissions by their JSON-visible fields.
func equalPermissions(a, b []*Permission) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ja, errA := json.Marshal(a[i])
		jb, errB := json.Marshal(b[i])
		if errA != nil || errB != nil || string(ja) != string(jb) {
			return false
		}
	}
	return true
}

// nextIndex is the index of the state after one change. An empty state's
// first change makes it 2, not 1: the Consul-shaped API reports index 0 as
// 1 (Consul never answers 0), and a blocking query on the empty store must
// see the first change as one.
func (st State) nextIndex() uint64 { return max(st.Index, 1) + 1 }
