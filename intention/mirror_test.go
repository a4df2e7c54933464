package intention

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestReplacePublishesOnChangeOnly(t *testing.T) {
	s := newStore(t, "", true)
	var notified atomic.Int32
	s.Subscribe(func() { notified.Add(1) })
	st, deny := mustUpsert(t, State{Index: 10}, ixn("web", "db", "deny"), false, t0)
	st, _ = mustUpsert(t, st, ixn("*", "*", "allow"), false, t0)

	if err := s.Replace(st); err != nil {
		t.Fatal(err)
	}
	if n := notified.Load(); n != 1 || s.Index() != 12 {
		t.Fatalf("after first Replace: %d notifications, index %d", n, s.Index())
	}
	if allowed, m := s.Check("web", "db"); allowed || m == nil || m.ID != deny.ID {
		t.Fatalf("Check after Replace = %v, %+v", allowed, m)
	}
	// The same content, in another order and time zone: no notification.
	same := State{Index: st.Index, Intentions: []Intention{st.Intentions[1], st.Intentions[0]}}
	same.Intentions[0].CreatedAt = same.Intentions[0].CreatedAt.In(time.FixedZone("X", 3600))
	for _, again := range []State{st, same} {
		if err := s.Replace(again); err != nil {
			t.Fatal(err)
		}
	}
	if n := notified.Load(); n != 1 {
		t.Fatalf("identical Replace notified: %d", n)
	}
	// The caller's slice is copied.
	st.Intentions[0].Action = "allow"
	if allowed, _ := s.Check("web", "db"); allowed {
		t.Fatal("store changed through the slice given to Replace")
	}
	got := s.State()
	got.Intentions[0].Action = "allow"
	if allowed, _ := s.Check("web", "db"); allowed {
		t.Fatal("store changed through the slice State returned")
	}
	// Content change at the same index, then an index change alone.
	changed := s.State()
	changed.Intentions[0].Description = "edited"
	if err := s.Replace(changed); err != nil {
		t.Fatal(err)
	}
	changed.Index++
	if err := s.Replace(changed); err != nil {
		t.Fatal(err)
	}
	if n := notified.Load(); n != 3 || s.Index() != 13 {
		t.Fatalf("after two changes: %d notifications, index %d", n, s.Index())
	}
	// An invalid state changes nothing.
	before := s.State()
	dup := s.State()
	dup.Index++
	dup.Intentions[1].ID = dup.Intentions[0].ID
	if err := s.Replace(dup); !errors.Is(err, ErrStateCorrupt) {
		t.Fatalf("Replace(duplicate IDs) = %v", err)
	}
	if !reflect.DeepEqual(s.State(), before) || notified.Load() != 3 {
		t.Fatal("invalid Replace changed the store")
	}
}

func TestReplacePersists(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("a", "b", "allow"))
	st, _ := mustUpsert(t, State{Index: 50}, ixn("web", "db", "allow"), false, t0)
	if err := s.Replace(st); err != nil {
		t.Fatal(err)
	}
	if r := newStore(t, dir, false); !reflect.DeepEqual(r.State(), st) {
		t.Fatalf("reloaded %+v, want %+v", r.State(), st)
	}
	errDisk := errors.New("disk full")
	s.persist = func(string, []*Intention, uint64) error { return errDisk }
	notified := 0
	s.Subscribe(func() { notified++ })
	next, _ := mustUpsert(t, st, ixn("api", "db", "allow"), false, t0)
	if err := s.Replace(next); !errors.Is(err, errDisk) {
		t.Fatalf("Replace with a failing disk = %v", err)
	}
	if !reflect.DeepEqual(s.State(), st) || notified != 0 {
		t.Fatal("failed Replace changed the store")
	}
}

// serverWriter is the servers' side of a mirror in these tests: a second
// Store that makes the writes, as the cluster's leader would.
type serverWriter struct {
	mu        sync.Mutex // serializes writes, so Index() is the write's index
	srv       *Store
	deadlines chan time.Duration
}

func (w *serverWriter) call(ctx context.Context, op func() (Intention, error)) (Intention, uint64, error) {
	if dl, ok := ctx.Deadline(); ok {
		select {
		case w.deadlines <- time.Until(dl):
		default:
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ix, err := op()
	if err != nil {
		return Intention{}, 0, fmt.Errorf("server refused: %w", err)
	}
	return ix, w.srv.Index(), nil
}

func (w *serverWriter) Upsert(ctx context.Context, in Intention, replace bool) (Intention, uint64, error) {
	return w.call(ctx, func() (Intention, error) { return w.srv.Upsert(in, replace) })
}

func (w *serverWriter) Delete(ctx context.Context, src, dst string) (Intention, uint64, error) {
	return w.call(ctx, func() (Intention, error) { return Intention{}, w.srv.Delete(src, dst) })
}

func (w *serverWriter) DeleteByID(ctx context.Context, id string, pre Precondition) (Intention, uint64, error) {
	return w.call(ctx, func() (Intention, error) { return Intention{}, w.srv.DeleteByIDCtx(ctx, id, pre) })
}

func (w *serverWriter) UpdateByID(ctx context.Context, id string, in Intention, pre Precondition) (Intention, uint64, error) {
	return w.call(ctx, func() (Intention, error) { return w.srv.UpdateByIDCtx(ctx, id, in, pre) })
}

// feed copies srv's state into mirror from a goroutine, delay after each
// change, as the cluster's watch would.
func feed(t *testing.T, srv, mirror *Store, delay time.Duration) {
	kick, stop, done := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	cancel := srv.Subscribe(func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-kick:
				time.Sleep(delay)
				if err := mirror.Replace(srv.State()); err != nil {
					t.Errorf("Replace: %v", err)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); close(stop); <-done })
}

func newMirrorPair(t *testing.T, delay time.Duration) (srv, mirror *Store, w *serverWriter) {
	srv = newStore(t, t.TempDir(), true, ixn("seed", "db", "allow"))
	w = &serverWriter{srv: srv, deadlines: make(chan time.Duration, 1)}
	mirror = NewMirror(w, true, nil)
	if err := mirror.Replace(srv.State()); err != nil {
		t.Fatal(err)
	}
	feed(t, srv, mirror, delay)
	return srv, mirror, w
}

func TestMirrorReadsItsOwnWrites(t *testing.T) {
	srv, mirror, w := newMirrorPair(t, 100*time.Millisecond)
	deny, err := mirror.Upsert(ixn("web", "db", "deny"), false)
	if err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if allowed, m := mirror.Check("web", "db"); allowed || m == nil || m.ID != deny.ID {
		t.Fatalf("Check right after Upsert = %v, %+v; the mirror did not wait for its write", allowed, m)
	}
	if got, err := srv.Get("web", "db"); err != nil || !reflect.DeepEqual(got, deny) {
		t.Fatalf("server holds %+v, %v; want %+v", got, err, deny)
	}
	if mirror.Index() != srv.Index() || mirror.Index() != deny.ModifyIndex {
		t.Fatalf("mirror index %d, server %d, write %d", mirror.Index(), srv.Index(), deny.ModifyIndex)
	}
	if d := <-w.deadlines; d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("Writer got a deadline in %v, want 10s", d)
	}

	if err := mirror.Delete("web", "db"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if allowed, m := mirror.Check("web", "db"); !allowed || m != nil {
		t.Fatalf("Check right after Delete = %v, %+v", allowed, m)
	}
	seed, err := mirror.Get("seed", "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := mirror.DeleteByID(seed.ID); err != nil {
		t.Fatalf("DeleteByID: %v", err)
	}
	if _, err := mirror.Get("seed", "db"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get right after DeleteByID = %v", err)
	}
}

func TestMirrorReturnsWriterErrors(t *testing.T) {
	srv, mirror, _ := newMirrorPair(t, 10*time.Millisecond)
	before := mirror.State()
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"exists", func() error { _, err := mirror.Upsert(ixn("seed", "db", "deny"), false); return err }, ErrExists},
		{"invalid", func() error { _, err := mirror.Upsert(ixn("we*", "db", "deny"), true); return err }, ErrInvalid},
		{"not found", func() error { return mirror.Delete("nope", "db") }, ErrNotFound},
		{"not found by ID", func() error { return mirror.DeleteByID("nope") }, ErrNotFound},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "server refused: ") {
			t.Errorf("%s: err = %v, want the Writer's error wrapping %v", tc.name, err, tc.want)
		}
	}
	if !reflect.DeepEqual(mirror.State(), before) || srv.Index() != before.Index {
		t.Fatal("refused writes changed a store")
	}
}

func TestMirrorConcurrentWriters(t *testing.T) {
	_, mirror, _ := newMirrorPair(t, time.Millisecond)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				src := fmt.Sprintf("svc-%d-%d", g, i)
				ix, err := mirror.Upsert(ixn(src, "db", "deny"), false)
				if err != nil {
					t.Errorf("Upsert %s: %v", src, err)
					return
				}
				if got, err := mirror.GetByID(ix.ID); err != nil || !reflect.DeepEqual(got, ix) {
					t.Errorf("GetByID right after Upsert %s = %+v, %v", src, got, err)
				}
			}
		}(g)
	}
	wg.Wait()
	if n := len(mirror.List()); n != 21 {
		t.Fatalf("mirror holds %d intentions, want 21", n)
	}
}

// stuckWriter accepts every write but the mirror never sees the index it
// returns; or fails with err.
type stuckWriter struct{ err error }

func (w stuckWriter) Upsert(_ context.Context, in Intention, _ bool) (Intention, uint64, error) {
	in.ID = "from-server"
	return in, 1000, w.err
}
func (w stuckWriter) Delete(context.Context, string, string) (Intention, uint64, error) {
	return Intention{}, 1000, w.err
}
func (w stuckWriter) DeleteByID(context.Context, string, Precondition) (Intention, uint64, error) {
	return Intention{}, 1000, w.err
}
func (w stuckWriter) UpdateByID(_ context.Context, id string, in Intention, _ Precondition) (Intention, uint64, error) {
	in.ID = id
	return in, 1000, w.err
}

func TestMirrorWaitIsBounded(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{mu: &logMu, w: &logs}, Level: hclog.Warn})
	mirror := NewMirror(stuckWriter{}, false, logger)
	mirror.waitTimeout = 150 * time.Millisecond
	start := time.Now()
	ix, err := mirror.Upsert(ixn("web", "db", "allow"), false)
	if took := time.Since(start); err != nil || ix.ID != "from-server" || took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Upsert = %+v, %v after %v; want the write's result after the 150ms wait", ix, err, took)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if !strings.Contains(out, "has not seen it yet") || !strings.Contains(out, "index=1000") {
		t.Fatalf("no warning logged: %q", out)
	}

	errBoom := errors.New("servers unreachable")
	failing := NewMirror(stuckWriter{err: errBoom}, false, nil)
	failing.waitTimeout = time.Hour
	if _, err := failing.Upsert(ixn("web", "db", "allow"), false); err != errBoom {
		t.Fatalf("Upsert with a failing Writer = %v, want it unchanged", err)
	}
	if err := failing.Delete("web", "db"); err != errBoom {
		t.Fatalf("Delete with a failing Writer = %v, want it unchanged", err)
	}
	if failing.Index() != 0 || len(failing.List()) != 0 {
		t.Fatal("a mirror changed without Replace")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
