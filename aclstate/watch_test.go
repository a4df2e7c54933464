package aclstate

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/acl"
)

// next is the next index Watch reports, failing the test after a while.
func next(t *testing.T, ch <-chan uint64) uint64 {
	t.Helper()
	select {
	case idx, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return idx
	case <-time.After(10 * time.Second):
		t.Fatal("no index from Watch within 10s")
		return 0
	}
}

// Watch reports the index at once, then every write's, coalesced for a
// slow reader, and closes when its context ends.
func TestWatch(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx)
	if idx := next(t, ch); idx != 0 {
		t.Fatalf("first index of an empty store = %d, want 0", idx)
	}
	p := mustPolicy(t, s, "read", "")
	if idx := next(t, ch); idx != p.ModifyIndex {
		t.Fatalf("index after a policy write = %d, want %d", idx, p.ModifyIndex)
	}
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeClient, Policies: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	if idx := next(t, ch); idx != tok.ModifyIndex {
		t.Fatalf("index after a token write = %d, want %d", idx, tok.ModifyIndex)
	}
	// Writes the reader does not keep up with: indexes only grow and end
	// at the last write's.
	for range 5 {
		mustPolicy(t, s, "read", "")
	}
	if err := s.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	want, _ := s.Index(ctx)
	for last := tok.ModifyIndex; last != want; {
		idx := next(t, ch)
		if idx <= last || idx > want {
			t.Fatalf("index %d after %d (last write %d)", idx, last, want)
		}
		last = idx
	}
	// A refused write moves nothing.
	if err := s.DeletePolicy(ctx, "nope"); err == nil {
		t.Fatal("DeletePolicy of a missing policy succeeded")
	}
	select {
	case idx := <-ch:
		t.Fatalf("index %d reported without a write", idx)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a value after the context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel not closed after the context ended")
	}
}

// A watch that starts after writes reports the current index first.
func TestWatchStartsAtIndex(t *testing.T) {
	s := newStore(t)
	p := mustPolicy(t, s, "read", "")
	ch := s.Watch(ctxT(t, 10*time.Second))
	if idx := next(t, ch); idx != p.ModifyIndex {
		t.Fatalf("first index %d, want %d", idx, p.ModifyIndex)
	}
}
