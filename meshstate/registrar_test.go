package meshstate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

// recWriter is a CatalogWriter recording what reached "the servers"; it
// fails while failing is set.
type recWriter struct {
	mu      sync.Mutex
	failing bool
	stored  map[string][]catalog.ServiceInstance
	calls   int
}

func (w *recWriter) PutAlloc(_ context.Context, allocID string, insts []catalog.ServiceInstance) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.failing {
		return errors.New("server unreachable")
	}
	w.stored[allocID] = insts
	return nil
}

func (w *recWriter) DeleteAlloc(_ context.Context, allocID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.failing {
		return errors.New("server unreachable")
	}
	delete(w.stored, allocID)
	return nil
}

func (w *recWriter) has(allocID string, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stored[allocID]) == n
}

func (w *recWriter) setFailing(v bool) {
	w.mu.Lock()
	w.failing = v
	w.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegistrarWritesRetriesAndRepairs(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	w := &recWriter{stored: map[string][]catalog.ServiceInstance{}, failing: true}
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: time.Hour})
	defer r.Stop()

	r.Register(inst("n1", "a1", "i1"))
	r.Register(inst("n1", "a1", "i1b"))
	if len(cat.All()) != 2 {
		t.Fatalf("local catalog = %v, want both instances at once", catalogIDs(cat))
	}
	// The servers hold an allocation this node no longer runs (it ended
	// while the agent was down): anti-entropy removes it.
	_ = m.Apply(Batch{Revision: 1, Reset: true, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "gone", Instances: []catalog.ServiceInstance{inst("n1", "gone", "g")}}}})
	w.stored["gone"] = []catalog.ServiceInstance{inst("n1", "gone", "g")}
	r.Start()
	time.Sleep(200 * time.Millisecond)
	if w.has("a1", 2) {
		t.Fatal("written while the writer fails")
	}
	w.setFailing(false) // the server is back: the retry (1 s backoff) writes
	waitFor(t, "a1 written after the failure", func() bool { return w.has("a1", 2) })
	waitFor(t, "the stale allocation removed", func() bool { return !w.has("gone", 1) })

	// The servers dropped this node's registrations (it was marked down):
	// the feed says so and the registrar writes them again.
	_ = m.Apply(Batch{Revision: 2, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "a1", Instances: []catalog.ServiceInstance{inst("n1", "a1", "i1"), inst("n1", "a1", "i1b")}}}})
	w.mu.Lock()
	delete(w.stored, "a1")
	w.mu.Unlock()
	_ = m.Apply(Batch{Revision: 3, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "a1"}}})
	waitFor(t, "a1 repaired after the servers dropped it", func() bool { return w.has("a1", 2) })

	r.DeregisterAlloc("a1")
	if len(cat.All()) != 0 {
		t.Fatalf("local catalog after deregister = %v", catalogIDs(cat))
	}
	waitFor(t, "a1 deleted on the servers", func() bool { return !w.has("a1", 2) })
}

// In sync, a full anti-entropy pass writes nothing.
func TestRegistrarInSyncWritesNothing(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	w := &recWriter{stored: map[string][]catalog.ServiceInstance{}}
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: 50 * time.Millisecond})
	defer r.Stop()
	i1 := inst("n1", "a1", "i1")
	r.Register(i1)
	_ = m.Apply(Batch{Revision: 1, Reset: true, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "a1", Instances: []catalog.ServiceInstance{i1}}}})
	r.Start()
	waitFor(t, "first write", func() bool { return w.has("a1", 1) })
	w.mu.Lock()
	before := w.calls
	w.mu.Unlock()
	time.Sleep(300 * time.Millisecond) // ~6 anti-entropy passes
	w.mu.Lock()
	after := w.calls
	w.mu.Unlock()
	if after != before {
		t.Fatalf("%d writes while in sync", after-before)
	}
}

// Deregister removes one instance (a task's service while its task is
// down): locally at once, and on the servers, where the allocation's other
// instances stay; removing its last instance removes the allocation there.
func TestRegistrarDeregisterOneInstance(t *testing.T) {
	cat := catalog.New()
	w := &recWriter{stored: map[string][]catalog.ServiceInstance{}}
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, SyncInterval: time.Hour})
	defer r.Stop()
	r.Register(inst("n1", "a1", "group"))
	r.Register(inst("n1", "a1", "task"))
	r.Start()
	waitFor(t, "both written", func() bool { return w.has("a1", 2) })
	if err := r.Deregister("task"); err != nil {
		t.Fatal(err)
	}
	if ids := catalogIDs(cat); len(ids) != 1 || ids[0] != "group" {
		t.Fatalf("local catalog = %v, want only group", ids)
	}
	waitFor(t, "the task service removed on the servers", func() bool { return w.has("a1", 1) })
	w.mu.Lock()
	left := w.stored["a1"][0].ID
	w.mu.Unlock()
	if left != "group" {
		t.Fatalf("servers hold %q, want group", left)
	}
	if err := r.Deregister("task"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("second Deregister: %v, want catalog.ErrNotFound", err)
	}
	if err := r.Deregister("group"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the allocation removed on the servers", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.stored["a1"]
		return !ok
	})
	r.Register(inst("n1", "a1", "task"))
	waitFor(t, "the task service written again", func() bool { return w.has("a1", 1) })
}
