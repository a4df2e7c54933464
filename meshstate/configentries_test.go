package meshstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/testutil"
)

func entry(t testing.TB, src string) configentry.Entry {
	t.Helper()
	e, err := configentry.Parse("test.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func defaults(t testing.TB, name, proto string) configentry.Entry {
	return entry(t, fmt.Sprintf(`{"Kind":"service-defaults","Name":%q,"Protocol":%q}`, name, proto))
}

func u64(v uint64) *uint64 { return &v }

func TestConfigEntriesWriteReadDelete(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if set, idx, err := s.ConfigEntries(ctx); err != nil || set.Len() != 0 || idx != 0 {
		t.Fatalf("ConfigEntries on an empty prefix = %v, %d, %v", set, idx, err)
	}
	ok, idx, err := s.PutConfigEntry(ctx, defaults(t, "web", "http"), nil)
	if err != nil || !ok || idx != uint64(currentRev(t, c)) {
		t.Fatalf("PutConfigEntry = %v, %d, %v", ok, idx, err)
	}
	first := idx
	set, idx, err := s.ConfigEntries(ctx)
	got, _ := set.Get(configentry.ServiceDefaults, "web").(*consul.ServiceConfigEntry)
	if err != nil || idx != first || got == nil || got.Protocol != "http" || got.CreateIndex != first || got.ModifyIndex != first {
		t.Fatalf("ConfigEntries = %+v, %d, %v", got, idx, err)
	}

	// Check-and-set: 0 creates only; N replaces only at ModifyIndex N.
	if ok, _, err := s.PutConfigEntry(ctx, defaults(t, "web", "grpc"), u64(0)); err != nil || ok {
		t.Fatalf("cas=0 over an existing entry = %v, %v; want false", ok, err)
	}
	if ok, _, err := s.PutConfigEntry(ctx, defaults(t, "web", "grpc"), u64(first+100)); err != nil || ok {
		t.Fatalf("cas with a stale index = %v, %v; want false", ok, err)
	}
	ok, second, err := s.PutConfigEntry(ctx, defaults(t, "web", "grpc"), u64(first))
	if err != nil || !ok || second <= first {
		t.Fatalf("cas at the entry's index = %v, %d, %v", ok, second, err)
	}
	if ok, _, err := s.PutConfigEntry(ctx, defaults(t, "api", "http"), u64(0)); err != nil || !ok {
		t.Fatalf("cas=0 create = %v, %v", ok, err)
	}
	set, _, _ = s.ConfigEntries(ctx)
	got = set.Get(configentry.ServiceDefaults, "web").(*consul.ServiceConfigEntry)
	if got.Protocol != "grpc" || got.CreateIndex != first || got.ModifyIndex != second || set.Len() != 2 {
		t.Fatalf("after the cas write: %+v, %d entries", got, set.Len())
	}

	// Deletes: cas 0 never deletes, a stale cas does not, an absent entry is fine.
	if ok, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "web"}, u64(0)); err != nil || ok {
		t.Fatalf("delete cas=0 = %v, %v; want false", ok, err)
	}
	if ok, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "web"}, u64(first)); err != nil || ok {
		t.Fatalf("delete with a stale cas = %v, %v; want false", ok, err)
	}
	ok, idx, err = s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "web"}, u64(second))
	if err != nil || !ok || idx <= second {
		t.Fatalf("delete = %v, %d, %v", ok, idx, err)
	}
	rev := currentRev(t, c)
	if ok, idx2, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "web"}, nil); err != nil || !ok || idx2 != idx {
		t.Fatalf("delete of an absent entry = %v, %d, %v; want true at index %d", ok, idx2, err, idx)
	}
	if currentRev(t, c) != rev {
		t.Fatal("deleting an absent entry wrote to etcd")
	}
	set, idx2, _ := s.ConfigEntries(ctx)
	if set.Len() != 1 || set.Get("service-defaults", "api") == nil || idx2 != idx {
		t.Fatalf("after delete: %v (index %d)", set.List(""), idx2)
	}
}

func TestConfigEntriesRefusedWritesChangeNothing(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	rev := currentRev(t, c)
	bad := &consul.ServiceConfigEntry{Kind: "service-nope", Name: "web"}
	if _, _, err := s.PutConfigEntry(ctx, bad, nil); !errors.Is(err, configentry.ErrUnknownKind) {
		t.Errorf("unknown kind = %v, want ErrUnknownKind", err)
	}
	for _, name := range []string{"", "a/b"} {
		if _, _, err := s.PutConfigEntry(ctx, &consul.ServiceConfigEntry{Kind: "service-defaults", Name: name}, nil); !errors.Is(err, configentry.ErrInvalid) {
			t.Errorf("name %q = %v, want ErrInvalid", name, err)
		}
	}
	if _, _, err := s.PutConfigEntry(ctx, nil, nil); !errors.Is(err, configentry.ErrInvalid) {
		t.Errorf("nil entry = %v, want ErrInvalid", err)
	}
	if _, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "nope", Name: "x"}, nil); !errors.Is(err, configentry.ErrUnknownKind) {
		t.Errorf("delete of an unknown kind = %v, want ErrUnknownKind", err)
	}
	if got := currentRev(t, c); got != rev {
		t.Fatalf("refused writes moved the revision from %d to %d", rev, got)
	}
	errFull := errors.New("disk full")
	full := Open(c, Options{Prefix: prefix, DiskCheck: func() error { return errFull }})
	if _, _, err := full.PutConfigEntry(ctx, defaults(t, "web", "http"), nil); !errors.Is(err, errFull) {
		t.Errorf("write with a full disk = %v", err)
	}
}

// A stored entry that does not decode fails reads and writes (they would
// act on the entries without it); the feed keeps its last good version.
func TestConfigEntriesCorrupt(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	reg := configentry.NewRegistry()
	m := NewMirror(MirrorConfig{ConfigEntries: reg})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Follow(fctx, m.Apply) }()
	t.Cleanup(func() { cancel(); <-done })

	if _, _, err := s.PutConfigEntry(ctx, defaults(t, "web", "http"), nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the entry in the registry", func() bool {
		set, _ := reg.Current()
		return set.Get("service-defaults", "web") != nil
	})
	for _, v := range []string{`{"Kind":"service-defaults","Name":"web","Protocol":`, `{"Kind":"service-defaults","Name":"other"}`,
		`{"Kind":"service-defaults","Name":"web","Bogus":1}`} {
		if _, err := c.Put(ctx, prefix+"config/entries/service-defaults/web", v); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ConfigEntries(ctx); !errors.Is(err, ErrConfigCorrupt) {
			t.Fatalf("ConfigEntries over %s = %v, want ErrConfigCorrupt", v, err)
		}
		if _, _, err := s.PutConfigEntry(ctx, defaults(t, "api", "http"), nil); !errors.Is(err, ErrConfigCorrupt) {
			t.Fatalf("write beside %s = %v, want ErrConfigCorrupt", v, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the feed applied the corrupt values
	set, _ := reg.Current()
	if e, ok := set.Get("service-defaults", "web").(*consul.ServiceConfigEntry); !ok || e.Protocol != "http" {
		t.Fatalf("registry after corrupt values = %v, want the last good entry", set.List(""))
	}
}

// The mirror's registry follows every write and delete, with the config
// index; a new store (a restarted server) and a new feed find them all.
func TestConfigEntriesFeedRegistry(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 30*time.Second)
	if _, _, err := s.PutConfigEntry(ctx, defaults(t, "before", "http"), nil); err != nil {
		t.Fatal(err)
	}
	reg := configentry.NewRegistry()
	notified := make(chan uint64, 16)
	reg.Subscribe(func(i uint64) { notified <- i })
	var onMu sync.Mutex
	var onIndexes []uint64
	m := NewMirror(MirrorConfig{ConfigEntries: reg, OnConfig: func(set *configentry.Set, i uint64) {
		onMu.Lock()
		onIndexes = append(onIndexes, i)
		onMu.Unlock()
	}})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Follow(fctx, m.Apply) }()
	t.Cleanup(func() { cancel(); <-done })

	waitIndex := func(what string, want uint64) *configentry.Set {
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, what, func() bool { _, i := reg.Current(); return i == want })
		set, _ := reg.Current()
		return set
	}
	_, idx, _ := s.ConfigEntries(ctx)
	if set := waitIndex("the reset", idx); set.Len() != 1 || set.Get("service-defaults", "before") == nil {
		t.Fatalf("reset set = %v", set.List(""))
	}
	_, idx, err := s.PutConfigEntry(ctx, defaults(t, "web", "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	set := waitIndex("the write", idx)
	if e := set.Get("service-defaults", "web"); set.Len() != 2 || e == nil || e.GetModifyIndex() != idx {
		t.Fatalf("set after write = %v", set.List(""))
	}
	_, idx, err = s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "before"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set := waitIndex("the delete", idx); set.Len() != 1 || set.Get("service-defaults", "before") != nil {
		t.Fatalf("set after delete = %v", set.List(""))
	}
	select {
	case <-notified:
	default:
		t.Fatal("subscribers were not notified")
	}
	// OnConfig runs just after the registry is replaced: wait for it, and
	// never fail holding onMu (the feed's next OnConfig would block the
	// cleanup's wait for it).
	seenIndexes := func() []uint64 {
		onMu.Lock()
		defer onMu.Unlock()
		return slices.Clone(onIndexes)
	}
	testutil.WaitFor(t, 5*time.Second, "OnConfig for the delete", func() bool {
		got := seenIndexes()
		return len(got) > 0 && got[len(got)-1] == idx
	})
	if got := seenIndexes(); len(got) < 3 {
		t.Fatalf("OnConfig saw indexes %v; want the reset, the write and the delete (last %d)", got, idx)
	}

	// A restarted server: a new client and store over the same state.
	s2 := openTest(t, newClient(t), prefix)
	set2, idx2, err := s2.ConfigEntries(ctx)
	if err != nil || idx2 != idx || set2.Len() != 1 || set2.Get("service-defaults", "web").GetModifyIndex() != set.Get("service-defaults", "web").GetModifyIndex() {
		t.Fatalf("reopened store = %v, %d, %v", set2.List(""), idx2, err)
	}
	reg2 := configentry.NewRegistry()
	m2 := NewMirror(MirrorConfig{ConfigEntries: reg2})
	snap, err := s2.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = m2.Apply(snap)
	if got, i := reg2.Current(); got.Len() != 1 || i != idx {
		t.Fatalf("a new mirror's registry = %v at %d, want 1 entry at %d", got.List(""), i, idx)
	}
}

// Writers racing on different entries all land (each retried after
// losing a race), none lost.
func TestConfigEntriesConcurrentWrites(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := openTest(t, c, prefix)
			if _, _, err := s.PutConfigEntry(ctx, defaults(t, fmt.Sprintf("svc%d", i), "http"), nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	set, _, err := openTest(t, c, prefix).ConfigEntries(ctx)
	if err != nil || set.Len() != 8 {
		t.Fatalf("after concurrent writes: %d entries, %v", set.Len(), err)
	}
}

// The canary entries (config/canary) land in dependency order; a router
// before its service speaks http, or deleting a resolver a router needs,
// is refused and changes nothing.
func TestConfigEntriesReferentialChecks(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	router := entry(t, `{"Kind":"service-router","Name":"b","Routes":[
		{"Match":{"HTTP":{"PathPrefix":"/admin"}},"Destination":{"ServiceSubset":"v2"}}]}`)
	rev := currentRev(t, c)
	_, _, err := s.PutConfigEntry(ctx, router, nil)
	if !errors.Is(err, configentry.ErrConflict) && !errors.Is(err, configentry.ErrInvalid) {
		t.Fatalf("router before its service speaks http = %v, want ErrConflict", err)
	}
	for _, src := range []string{
		`{"Kind":"service-defaults","Name":"b","Protocol":"http"}`,
		`{"Kind":"service-resolver","Name":"b","DefaultSubset":"v1","Subsets":{
			"v1":{"Filter":"Service.Meta.version == v1"},"v2":{"Filter":"Service.Meta.version == v2"}}}`,
		`{"Kind":"service-splitter","Name":"b","Splits":[{"Weight":90,"ServiceSubset":"v1"},{"Weight":10,"ServiceSubset":"v2"}]}`,
	} {
		if currentRev(t, c) != rev {
			t.Fatal("a refused write moved the revision")
		}
		if _, _, err := s.PutConfigEntry(ctx, entry(t, src), nil); err != nil {
			t.Fatalf("write %s: %v", src, err)
		}
		rev = currentRev(t, c)
	}
	if ok, _, err := s.PutConfigEntry(ctx, router, nil); err != nil || !ok {
		t.Fatalf("router after its dependencies = %v, %v", ok, err)
	}
	rev = currentRev(t, c)
	if _, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-resolver", Name: "b"}, nil); !errors.Is(err, configentry.ErrConflict) {
		t.Fatalf("delete of a resolver in use = %v, want ErrConflict", err)
	}
	if _, _, err := s.PutConfigEntry(ctx, entry(t, `{"Kind":"service-splitter","Name":"b","Splits":[{"Weight":90,"ServiceSubset":"v1"}]}`), nil); !errors.Is(err, configentry.ErrInvalid) {
		t.Fatalf("weights summing to 90 = %v, want ErrInvalid", err)
	}
	if currentRev(t, c) != rev {
		t.Fatal("refused writes moved the revision")
	}
	for _, k := range []string{"service-router", "service-splitter", "service-resolver", "service-defaults"} {
		if ok, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: k, Name: "b"}, nil); err != nil || !ok {
			t.Fatalf("delete %s in reverse order = %v, %v", k, ok, err)
		}
	}
}
