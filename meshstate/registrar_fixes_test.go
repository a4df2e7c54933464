package meshstate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

// opWriter records every call per allocation and refuses the allocations
// in refuse (wrapping ErrRefused, as the agent's RPC writer does).
type opWriter struct {
	mu     sync.Mutex
	refuse map[string]bool
	puts   map[string][][]catalog.ServiceInstance
	dels   map[string]int
}

func newOpWriter() *opWriter {
	return &opWriter{refuse: map[string]bool{}, puts: map[string][][]catalog.ServiceInstance{}, dels: map[string]int{}}
}

func (w *opWriter) PutAlloc(_ context.Context, id string, insts []catalog.ServiceInstance) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.puts[id] = append(w.puts[id], insts)
	if w.refuse[id] {
		return fmt.Errorf("failed to register: %w: permission denied", ErrRefused)
	}
	return nil
}

func (w *opWriter) DeleteAlloc(_ context.Context, id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dels[id]++
	if w.refuse[id] {
		return fmt.Errorf("failed to deregister: %w", ErrRefused)
	}
	return nil
}

func (w *opWriter) counts(id string) (puts, dels int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.puts[id]), w.dels[id]
}

func (w *opWriter) lastPut(id string) []catalog.ServiceInstance {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.puts[id]
	if len(p) == 0 {
		return nil
	}
	return p[len(p)-1]
}

func withCheck(i catalog.ServiceInstance, status, output string) catalog.ServiceInstance {
	i.Checks = []catalog.Check{{ID: "c1", Name: "c1", Type: "http", Status: status, Output: output}}
	return i
}

// On an agent restart the servers hold the registrations of allocations
// being restored, not re-registered yet: they are live and stay; an
// allocation that is not live is removed.
func TestRegistrarKeepsLiveAllocations(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	w := newOpWriter()
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: 50 * time.Millisecond,
		Live: func(id string) bool { return id == "restored" }})
	defer r.Stop()
	_ = m.Apply(Batch{Revision: 1, Reset: true, Allocs: []AllocRegs{
		{NodeID: "n1", AllocID: "restored", Instances: []catalog.ServiceInstance{inst("n1", "restored", "r1")}},
		{NodeID: "n1", AllocID: "gone", Instances: []catalog.ServiceInstance{inst("n1", "gone", "g1")}},
	}})
	r.Start()
	waitFor(t, "the allocation that is not live removed", func() bool { _, d := w.counts("gone"); return d > 0 })
	time.Sleep(200 * time.Millisecond) // several full passes
	if p, d := w.counts("restored"); p != 0 || d != 0 {
		t.Fatalf("restored allocation: %d puts, %d deletes before its services registered again; want none", p, d)
	}
	// Its services hook runs again with the same registrations: in sync.
	r.Register(inst("n1", "restored", "r1"))
	time.Sleep(200 * time.Millisecond)
	if p, d := w.counts("restored"); p != 0 || d != 0 {
		t.Fatalf("restored allocation in sync: %d puts, %d deletes; want none", p, d)
	}
}

// The local catalog and the registrar's desired state never diverge under
// concurrent registration and deregistration of one allocation.
func TestRegistrarCatalogAndDesiredAgree(t *testing.T) {
	for round := range 50 {
		cat := catalog.New()
		r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: newOpWriter()})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					if (i+g)%3 == 0 {
						r.DeregisterAlloc("a1")
					} else {
						r.Register(inst("n1", "a1", fmt.Sprintf("i%d", i%4)))
					}
				}
			}()
		}
		wg.Wait()
		r.mu.Lock()
		want := len(r.desired["a1"])
		r.mu.Unlock()
		if got := len(cat.All()); got != want {
			t.Fatalf("round %d: local catalog has %d instances, desired %d", round, got, want)
		}
	}
}

// A refused allocation is written once, not retried by anti-entropy, and
// written again once its registrations change (not for output alone).
func TestRegistrarRefusedNotRetried(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	_ = m.Apply(Batch{Revision: 1, Reset: true})
	w := newOpWriter()
	w.refuse["bad"] = true
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: 30 * time.Millisecond})
	defer r.Stop()
	r.Start()
	r.Register(withCheck(inst("n1", "bad", "b1"), "passing", "x"))
	waitFor(t, "the first write", func() bool { p, _ := w.counts("bad"); return p == 1 })
	r.Register(withCheck(inst("n1", "bad", "b1"), "passing", "y")) // output only
	time.Sleep(300 * time.Millisecond)                             // ~10 full passes
	if p, _ := w.counts("bad"); p != 1 {
		t.Fatalf("refused allocation written %d times, want once", p)
	}
	r.Register(inst("n1", "bad", "b2"))
	waitFor(t, "a write after the registrations changed", func() bool { p, _ := w.counts("bad"); return p == 2 })
	r.DeregisterAlloc("bad")
	waitFor(t, "the delete", func() bool { _, d := w.counts("bad"); return d == 1 })
	time.Sleep(200 * time.Millisecond)
	if p, d := w.counts("bad"); p != 2 || d != 1 {
		t.Fatalf("after the refused delete: %d puts, %d deletes; want 2, 1", p, d)
	}
}

// Stopping an allocation without services costs no write; registering
// syncs that allocation without a full compare.
func TestRegistrarNoNeedlessWork(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	_ = m.Apply(Batch{Revision: 1, Reset: true, Allocs: []AllocRegs{
		{NodeID: "n1", AllocID: "restoring", Instances: []catalog.ServiceInstance{inst("n1", "restoring", "r1")}}}})
	w := newOpWriter()
	var lives atomic.Int32
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: time.Hour,
		Live: func(string) bool { lives.Add(1); return true }})
	defer r.Stop()
	r.Start()
	waitFor(t, "the first compare", func() bool { return lives.Load() == 1 })
	r.DeregisterAlloc("plain") // no services, not on the servers
	r.Register(inst("n1", "a1", "i1"))
	waitFor(t, "a1 written", func() bool { p, _ := w.counts("a1"); return p == 1 })
	time.Sleep(100 * time.Millisecond)
	if _, d := w.counts("plain"); d != 0 {
		t.Fatalf("%d deletes of an allocation that had no services", d)
	}
	if n := lives.Load(); n != 1 {
		t.Fatalf("%d compares, want only the first (a registration syncs its allocation only)", n)
	}
	r.DeregisterAlloc("a1")
	waitFor(t, "a1 deleted", func() bool { _, d := w.counts("a1"); return d == 1 })
}

// Output-only changes wait for the full pass; a status change is written
// at once; anti-entropy against the servers' copy ignores output.
func TestRegistrarOutputOnFullPassOnly(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat, SelfNode: "n1"})
	_ = m.Apply(Batch{Revision: 1, Reset: true})
	w := newOpWriter()
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, Mirror: m, SyncInterval: 700 * time.Millisecond})
	defer r.Stop()
	r.Start()
	r.Register(withCheck(inst("n1", "a1", "i1"), "passing", "out 1"))
	waitFor(t, "the first write", func() bool { p, _ := w.counts("a1"); return p == 1 })
	// The servers' copy (the feed) follows the write.
	_ = m.Apply(Batch{Revision: 2, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "a1", Instances: w.lastPut("a1")}}})
	start := time.Now()
	for i := range 5 {
		r.Register(withCheck(inst("n1", "a1", "i1"), "passing", fmt.Sprintf("out %d", i+2)))
	}
	time.Sleep(200 * time.Millisecond)
	if p, _ := w.counts("a1"); p != 1 && time.Since(start) < 600*time.Millisecond {
		t.Fatalf("%d writes for check output changes before the full pass, want 1", p)
	}
	waitFor(t, "the output written on the full pass", func() bool {
		last := w.lastPut("a1")
		return len(last) == 1 && last[0].Checks[0].Output == "out 6"
	})
	p, _ := w.counts("a1")
	r.Register(withCheck(inst("n1", "a1", "i1"), "critical", "out 6"))
	waitFor(t, "a status change written at once", func() bool { q, _ := w.counts("a1"); return q == p+1 })
	if time.Since(start) > 10*time.Second {
		t.Fatal("too slow")
	}
}

func TestFingerprintIgnoresOutputOnly(t *testing.T) {
	a := withCheck(inst("n1", "a1", "i1"), "passing", "one")
	b := withCheck(inst("n1", "a1", "i1"), "passing", "two")
	c := withCheck(inst("n1", "a1", "i1"), "critical", "one")
	if Fingerprint([]catalog.ServiceInstance{a}) != Fingerprint([]catalog.ServiceInstance{b}) {
		t.Fatal("fingerprint differs for output alone")
	}
	if Fingerprint([]catalog.ServiceInstance{a}) == Fingerprint([]catalog.ServiceInstance{c}) {
		t.Fatal("fingerprint ignores the status")
	}
	if sameInstance(a, b) {
		t.Fatal("sameInstance ignores output: other nodes' check output would never reach the local catalog")
	}
	if a.Checks[0].Output != "one" {
		t.Fatal("Fingerprint changed its input")
	}
}
