package consulapi

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
)

// memStorage is a ca.Storage in memory, compared by Revision as etcd's is;
// edit changes the stored state as another server would.
type memStorage struct {
	mu  sync.Mutex
	st  []byte // JSON of the stored state; nil: nothing stored
	rev int64
}

func (s *memStorage) Load(context.Context) (*ca.StoredState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil, nil
	}
	var st ca.StoredState
	if err := json.Unmarshal(s.st, &st); err != nil {
		return nil, err
	}
	st.Revision = s.rev
	return &st, nil
}

func (s *memStorage) Save(_ context.Context, prev, next *ca.StoredState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (prev == nil) != (s.st == nil) || (prev != nil && prev.Revision != s.rev) {
		return ca.ErrStateConflict
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	s.st, s.rev = b, s.rev+1
	next.Revision = s.rev
	return nil
}

func (s *memStorage) edit(t *testing.T, fn func(*ca.StoredState)) {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil || st == nil {
		t.Fatalf("Load: %v", err)
	}
	fn(st)
	st.Index++
	if err := s.Save(context.Background(), st, st); err != nil {
		t.Fatal(err)
	}
}

// dropRoot removes the root with this ID from st.
func dropRoot(st *ca.StoredState, id string) {
	keep := st.Roots[:0]
	for _, r := range st.Roots {
		if r.ID != id {
			keep = append(keep, r)
		}
	}
	st.Roots = keep
}

// Another server drops the oldest root (roots A, B, C; B was dropped
// before and C's cross-signature from it cleared): no remaining root
// changes, yet a blocking CARoots with the old index returns with the
// smaller set.
func TestCARootsBlockingSeesDroppedRoot(t *testing.T) {
	ctx := context.Background()
	storage := &memStorage{}
	m, err := ca.New(ca.Config{Storage: storage}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	for range 2 {
		if err := m.Rotate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rs := m.Roots()
	if len(rs.Roots) != 3 {
		t.Fatalf("%d roots after two rotations, want 3", len(rs.Roots))
	}
	a, b := rs.Roots[0].ID, rs.Roots[1].ID
	storage.edit(t, func(st *ca.StoredState) {
		dropRoot(st, b)
		c := &st.Roots[len(st.Roots)-1]
		c.IntermediateCertsPEM, c.ModifyIndex = nil, st.Index+1
	})
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	client, _, _, _ := caConfigServer(t, Deps{CA: m})
	before, meta, err := client.Connect().CARoots(nil)
	if err != nil || len(before.Roots) != 2 {
		t.Fatalf("CARoots = %+v, %v; want roots A and C", before, err)
	}

	type result struct {
		roots *consul.CARootList
		index uint64
		err   error
	}
	done := make(chan result, 1)
	go func() {
		r, qm, err := client.Connect().CARoots(&consul.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 5 * time.Second})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{r, qm.LastIndex, nil}
	}()
	time.Sleep(100 * time.Millisecond) // the query blocks
	storage.edit(t, func(st *ca.StoredState) { dropRoot(st, a) })
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || len(r.roots.Roots) != 1 || r.roots.Roots[0].ID == a || r.index <= meta.LastIndex {
			t.Fatalf("blocking CARoots after the drop = %+v (index %d, was %d), %v; want root C alone at a higher index",
				r.roots, r.index, meta.LastIndex, r.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("blocking CARoots at index %d did not return when root A was dropped", meta.LastIndex)
	}
}
