package meshstate

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/intention"
)

func TestIntentionsWriter(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	w := s.Intentions()
	ctx := ctxT(t, 20*time.Second)

	if _, found, err := s.LoadIntentions(ctx); err != nil || found {
		t.Fatalf("LoadIntentions on an empty prefix = %v, %v", found, err)
	}
	ix, idx, err := w.Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false)
	if err != nil || idx != 2 || ix.ID == "" || !ix.CreatedAt.Equal(testNow) || ix.CreateIndex != 2 {
		t.Fatalf("Upsert = %+v, %d, %v", ix, idx, err)
	}
	if _, _, err := w.Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "deny"}, false); !errors.Is(err, intention.ErrExists) {
		t.Fatalf("Upsert of an existing pair = %v, want ErrExists", err)
	}
	up, idx, err := w.Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "deny"}, true)
	if err != nil || idx != 3 || up.ID != ix.ID || up.Action != intention.ActionDeny || up.ModifyIndex != 3 {
		t.Fatalf("replacing Upsert = %+v, %d, %v", up, idx, err)
	}
	if _, _, err := w.Upsert(ctx, intention.Intention{SourceName: "web*", DestinationName: "db", Action: "allow"}, false); !errors.Is(err, intention.ErrInvalid) {
		t.Fatalf("Upsert of a partial wildcard = %v, want ErrInvalid", err)
	}
	if _, _, err := w.Delete(ctx, "api", "db"); !errors.Is(err, intention.ErrNotFound) {
		t.Fatalf("Delete of an unknown pair = %v, want ErrNotFound", err)
	}
	if _, _, err := w.DeleteByID(ctx, "nope", nil); !errors.Is(err, intention.ErrNotFound) {
		t.Fatalf("DeleteByID of an unknown ID = %v, want ErrNotFound", err)
	}
	if _, _, err := w.Upsert(ctx, intention.Intention{SourceName: "*", DestinationName: "db", Action: "allow"}, false); err != nil {
		t.Fatal(err)
	}
	st, found, err := s.LoadIntentions(ctx)
	if err != nil || !found || st.Index != 4 || len(st.Intentions) != 2 {
		t.Fatalf("LoadIntentions = %+v, %v, %v", st, found, err)
	}
	// The precondition is judged on the stored intention; a refusal
	// deletes nothing.
	errRefused := errors.New("refused")
	if _, _, err := w.DeleteByID(ctx, ix.ID, func(stored intention.Intention) error {
		if stored.DestinationName != "db" {
			t.Errorf("precondition judged %+v", stored)
		}
		return errRefused
	}); !errors.Is(err, errRefused) {
		t.Fatalf("refused DeleteByID = %v", err)
	}
	if st, _, _ := s.LoadIntentions(ctx); st.Index != 4 {
		t.Fatalf("refused DeleteByID wrote: %+v", st)
	}
	gone, idx, err := w.DeleteByID(ctx, ix.ID, nil)
	if err != nil || idx != 5 || gone.ID != ix.ID {
		t.Fatalf("DeleteByID = %+v, %d, %v", gone, idx, err)
	}
	gone, idx, err = w.Delete(ctx, "*", "db")
	if err != nil || idx != 6 || gone.SourceName != "*" {
		t.Fatalf("Delete = %+v, %d, %v", gone, idx, err)
	}
	if st, _, _ := s.LoadIntentions(ctx); st.Index != 6 || len(st.Intentions) != 0 {
		t.Fatalf("state after deletes = %+v", st)
	}
}

// TestIntentionsConcurrentUpserts: eight writers through two stores (two
// clients) on one prefix; no update is lost and each gets its own index.
func TestIntentionsConcurrentUpserts(t *testing.T) {
	prefix := testPrefix(t)
	stores := []*Store{openTest(t, newClient(t), prefix), openTest(t, newClient(t), prefix)}
	ctx := ctxT(t, 30*time.Second)
	const writers = 8
	var wg sync.WaitGroup
	indexes := make([]uint64, writers)
	errs := make([]error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := intention.Intention{SourceName: fmt.Sprint("svc", i), DestinationName: "db", Action: "allow"}
			_, indexes[i], errs[i] = stores[i%2].Intentions().Upsert(ctx, in, false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	sort.Slice(indexes, func(i, j int) bool { return indexes[i] < indexes[j] })
	for i, idx := range indexes {
		if idx != uint64(i+2) {
			t.Fatalf("indexes returned = %v, want 2..%d once each", indexes, writers+1)
		}
	}
	st, _, err := stores[0].LoadIntentions(ctx)
	if err != nil || st.Index != writers+1 || len(st.Intentions) != writers {
		t.Fatalf("state = index %d with %d intentions (%v), want %d and %d", st.Index, len(st.Intentions), err, writers+1, writers)
	}
}

func TestImportIntentions(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	disk, _, err := intention.State{Index: 6}.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.ImportIntentions(ctx, disk); err != nil || !created {
		t.Fatalf("first import = %v, %v", created, err)
	}
	other, _, _ := intention.State{}.Upsert(intention.Intention{SourceName: "x", DestinationName: "y", Action: "deny"}, false, testNow)
	if created, err := s.ImportIntentions(ctx, other); err != nil || created {
		t.Fatalf("second import = %v, %v; want not created", created, err)
	}
	st, found, err := s.LoadIntentions(ctx)
	if err != nil || !found || st.Index != 7 || len(st.Intentions) != 1 || st.Intentions[0].SourceName != "web" {
		t.Fatalf("LoadIntentions = %+v, %v, %v", st, found, err)
	}
	// Writes go on from the imported index.
	if _, idx, err := s.Intentions().Delete(ctx, "web", "db"); err != nil || idx != 8 {
		t.Fatalf("Delete after import = %d, %v", idx, err)
	}
}

func TestIntentionsCorruptValue(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if _, err := c.Put(ctx, prefix+"intentions", `{"Index":1,"Intentions":[{"SourceName":"a*"}]}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LoadIntentions(ctx); !errors.Is(err, intention.ErrStateCorrupt) {
		t.Fatalf("LoadIntentions = %v, want ErrStateCorrupt", err)
	}
	_, _, err := s.Intentions().Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false)
	if !errors.Is(err, intention.ErrStateCorrupt) {
		t.Fatalf("Upsert over a corrupt value = %v, want ErrStateCorrupt", err)
	}
	if resp, _ := c.Get(ctx, prefix+"intentions"); len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Fatal("the corrupt value was overwritten")
	}
}
