package intention

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// mustUpsert applies Upsert and fails the test on error.
func mustUpsert(t *testing.T, st State, in Intention, replace bool, now time.Time) (State, Intention) {
	t.Helper()
	next, ix, err := st.Upsert(in, replace, now)
	if err != nil {
		t.Fatalf("Upsert(%s): %v", in, err)
	}
	return next, ix
}

func deepCopy(st State) State { return st.clone() }

func TestStateUpsertCreates(t *testing.T) {
	var empty State
	st1, web := mustUpsert(t, empty, ixn("web", "db", "ALLOW"), false, t0)
	if empty.Index != 0 || empty.Intentions != nil {
		t.Fatalf("receiver changed: %+v", empty)
	}
	if _, err := uuid.Parse(web.ID); err != nil {
		t.Fatalf("ID %q is not a UUID: %v", web.ID, err)
	}
	want := Intention{ID: web.ID, SourceNS: "default", SourceName: "web", DestinationNS: "default", DestinationName: "db",
		SourceType: "consul", Action: "allow", Precedence: 9, CreatedAt: t0, UpdatedAt: t0, CreateIndex: 2, ModifyIndex: 2} // an empty state is at 1
	if !reflect.DeepEqual(web, want) {
		t.Fatalf("written = %+v\nwant      %+v", web, want)
	}
	if st1.Index != 2 || !reflect.DeepEqual(st1.Intentions, []Intention{want}) {
		t.Fatalf("state = %+v", st1)
	}

	// A second intention: the result is in evaluation order, the receiver
	// (with spare capacity, so an append could reach its array) is intact.
	roomy := State{Index: st1.Index, Intentions: make([]Intention, 1, 4)}
	roomy.Intentions[0] = st1.Intentions[0]
	before := deepCopy(roomy)
	st2, wild := mustUpsert(t, roomy, ixn("*", "*", "deny"), false, t0.Add(time.Second))
	if !reflect.DeepEqual(roomy, before) || !reflect.DeepEqual(roomy.Intentions[:4][1], Intention{}) {
		t.Fatalf("receiver or its array was modified: %+v", roomy.Intentions[:4])
	}
	if wild.ID == web.ID || wild.CreateIndex != 3 || wild.ModifyIndex != 3 || st2.Index != 3 {
		t.Fatalf("second intention = %+v, state index %d", wild, st2.Index)
	}
	if len(st2.Intentions) != 2 || st2.Intentions[0].ID != web.ID || st2.Intentions[1].ID != wild.ID {
		t.Fatalf("not in evaluation order: %+v", st2.Intentions)
	}
}

func TestStateUpsertReplacePreservesIdentity(t *testing.T) {
	st, orig := mustUpsert(t, State{Index: 41}, ixn("web", "db", "allow"), false, t0)
	st, _ = mustUpsert(t, st, ixn("api", "db", "allow"), false, t0)
	before := deepCopy(st)
	later := t0.Add(time.Hour)
	in := ixn("web", "db", "deny")
	in.Description = "closed"
	next, got := mustUpsert(t, st, in, true, later)
	if !reflect.DeepEqual(st, before) {
		t.Fatalf("receiver changed by replace: %+v", st)
	}
	if got.ID != orig.ID || !got.CreatedAt.Equal(t0) || got.CreateIndex != 42 || !got.UpdatedAt.Equal(later) ||
		got.ModifyIndex != 44 || got.Action != "deny" || got.Description != "closed" {
		t.Fatalf("replaced = %+v (original %+v)", got, orig)
	}
	if next.Index != 44 || len(next.Intentions) != 2 {
		t.Fatalf("state = %+v", next)
	}
	if i := next.find(func(x *Intention) bool { return x.ID == orig.ID }); i < 0 || !reflect.DeepEqual(next.Intentions[i], got) {
		t.Fatalf("state does not hold the written intention: %+v", next.Intentions)
	}
	// Naming the intention by its own ID is allowed.
	in.ID, in.Action = orig.ID, "allow"
	if _, ix, err := next.Upsert(in, true, later); err != nil || ix.ID != orig.ID || ix.Action != "allow" {
		t.Fatalf("replace with own ID = %+v, %v", ix, err)
	}
}

func TestStateUpsertErrors(t *testing.T) {
	st, web := mustUpsert(t, State{}, ixn("web", "db", "allow"), false, t0)
	st, api := mustUpsert(t, st, ixn("api", "db", "allow"), false, t0)
	foreign := ixn("web", "db", "deny")
	foreign.ID = api.ID
	unknownID := ixn("new", "db", "deny")
	unknownID.ID = web.ID
	cases := []struct {
		name    string
		in      Intention
		replace bool
		want    error
		msg     string
	}{
		{"exists", ixn("web", "db", "deny"), false, ErrExists, "intention already exists: web => db"},
		{"foreign ID", foreign, true, ErrInvalid, "does not name the intention web => db"},
		{"ID on a new pair", unknownID, true, ErrInvalid, "does not name the intention new => db"},
		{"partial wildcard", ixn("web*", "db", "allow"), true, ErrInvalid, "no partial wildcards"},
		{"bad action", ixn("web", "db", "maybe"), true, ErrInvalid, `action "maybe"`},
		{"no destination", ixn("web", "", "allow"), true, ErrInvalid, "required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopy(st)
			got, ix, err := st.Upsert(tc.in, tc.replace, t0.Add(time.Minute))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if !reflect.DeepEqual(got, before) || !reflect.DeepEqual(st, before) || !reflect.DeepEqual(ix, Intention{}) {
				t.Fatalf("failed Upsert returned %+v / %+v", got, ix)
			}
		})
	}
}

func TestStateDelete(t *testing.T) {
	st, web := mustUpsert(t, State{Index: 9}, ixn("web", "db", "allow"), false, t0)
	st, api := mustUpsert(t, st, ixn("api", "db", "deny"), false, t0)
	before := deepCopy(st)

	next, removed, err := st.Delete("web", "db")
	if err != nil || !reflect.DeepEqual(removed, web) || next.Index != 12 || !reflect.DeepEqual(next.Intentions, []Intention{api}) {
		t.Fatalf("Delete = %+v, %+v, %v", next, removed, err)
	}
	next, removed, err = st.DeleteByID(api.ID, nil)
	if err != nil || !reflect.DeepEqual(removed, api) || next.Index != 12 || !reflect.DeepEqual(next.Intentions, []Intention{web}) {
		t.Fatalf("DeleteByID = %+v, %+v, %v", next, removed, err)
	}
	if !reflect.DeepEqual(st, before) {
		t.Fatalf("receiver changed by deletes: %+v", st)
	}
	if got, _, err := st.Delete("db", "web"); !errors.Is(err, ErrNotFound) || err.Error() != "intention not found: db => web" || !reflect.DeepEqual(got, before) {
		t.Fatalf("Delete(unknown) = %+v, %v", got, err)
	}
	if got, _, err := st.DeleteByID("nope", nil); !errors.Is(err, ErrNotFound) || err.Error() != `intention not found: ID "nope"` || !reflect.DeepEqual(got, before) {
		t.Fatalf("DeleteByID(unknown) = %+v, %v", got, err)
	}
	// The precondition sees the stored intention; its refusal is returned
	// unchanged and deletes nothing. An unknown ID is not judged.
	errRefused := errors.New("refused")
	var judged Intention
	refuse := func(stored Intention) error { judged = stored; return errRefused }
	if got, _, err := st.DeleteByID(api.ID, refuse); err != errRefused || !reflect.DeepEqual(judged, api) || !reflect.DeepEqual(got, before) {
		t.Fatalf("DeleteByID(refused) = %+v, %v after judging %+v", got, err, judged)
	}
	if _, _, err := st.DeleteByID("nope", refuse); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeleteByID(unknown, refuse) = %v", err)
	}
	// The Store reports the same errors.
	s := newStore(t, "", false)
	if err := s.Delete("db", "web"); err == nil || err.Error() != "intention not found: db => web" {
		t.Fatalf("Store.Delete(unknown) = %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	st, _ := mustUpsert(t, State{Index: 3}, ixn("web", "db", "allow"), false, t0)
	st, _ = mustUpsert(t, st, ixn("*", "db", "deny"), false, t0.Add(time.Second))
	b, err := EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeState(b)
	if err != nil {
		t.Fatalf("DecodeState: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
	b, err = EncodeState(State{})
	if err != nil || !bytes.Contains(b, []byte(`"Intentions":[]`)) {
		t.Fatalf("empty state encodes as %s, %v", b, err)
	}
	if got, err := DecodeState(b); err != nil || got.Index != 0 || len(got.Intentions) != 0 {
		t.Fatalf("empty state decodes as %+v, %v", got, err)
	}
	// Decoding normalizes and orders like the state file does.
	raw := `{"Index":7,"Intentions":[{"ID":"a","SourceName":"*","DestinationName":"*","Action":"DENY"},` +
		`{"ID":"b","SourceName":"web","DestinationName":"db","Action":"allow"}]}`
	got, err = DecodeState([]byte(raw))
	if err != nil || got.Index != 7 || len(got.Intentions) != 2 || got.Intentions[0].ID != "b" ||
		got.Intentions[1].Action != "deny" || got.Intentions[1].Precedence != 5 || got.Intentions[0].SourceNS != "default" {
		t.Fatalf("DecodeState(raw) = %+v, %v", got, err)
	}
}

func TestDecodeStateRejects(t *testing.T) {
	entry := func(id, src, dst, action string) string {
		return `{"ID":"` + id + `","SourceName":"` + src + `","DestinationName":"` + dst + `","Action":"` + action + `"}`
	}
	state := func(entries ...string) string { return `{"Index":1,"Intentions":[` + strings.Join(entries, ",") + `]}` }
	cases := map[string]string{
		"duplicate ID":     state(entry("a", "web", "db", "allow"), entry("a", "api", "db", "allow")),
		"duplicate pair":   state(entry("a", "web", "db", "allow"), entry("b", "web", "db", "deny")),
		"missing ID":       state(entry("", "web", "db", "allow")),
		"invalid action":   state(entry("a", "web", "db", "maybe")),
		"partial wildcard": state(entry("a", "web*", "db", "allow")),
		"truncated":        state(entry("a", "web", "db", "allow"))[:30],
		"trailing garbage": state() + "x",
		"wrong type":       `{"Index":"one"}`,
		"empty":            "",
		"null":             " null ",
		"array":            "[]",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if st, err := DecodeState([]byte(raw)); !errors.Is(err, ErrStateCorrupt) {
				t.Fatalf("DecodeState(%q) = %+v, %v; want ErrStateCorrupt", raw, st, err)
			}
		})
	}
}

func TestLoadDir(t *testing.T) {
	t.Run("nothing", func(t *testing.T) {
		absent := filepath.Join(t.TempDir(), "absent")
		for _, dir := range []string{t.TempDir(), absent} {
			st, found, err := LoadDir(dir)
			if err != nil || found || st.Index != 0 || len(st.Intentions) != 0 {
				t.Fatalf("LoadDir(%s) = %+v, %v, %v", dir, st, found, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("LoadDir created %v", entries)
			}
		}
		if _, err := os.Stat(absent); !os.IsNotExist(err) {
			t.Fatal("LoadDir created the directory")
		}
	})
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("web", "db", "allow"), ixn("*", "db", "deny"))
	t.Run("found", func(t *testing.T) {
		st, found, err := LoadDir(dir)
		if err != nil || !found || !reflect.DeepEqual(st, s.State()) {
			t.Fatalf("LoadDir = %+v, %v, %v; want %+v", st, found, err, s.State())
		}
	})
	path := filepath.Join(dir, fileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("corrupt", func(t *testing.T) {
		if err := os.WriteFile(path, bytes.Replace(good, []byte("deny"), []byte("dent"), 1), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, found, err := LoadDir(dir); !errors.Is(err, ErrStateCorrupt) || found || !strings.Contains(err.Error(), MarkerName) {
			t.Fatalf("LoadDir(corrupt) = %v, %v", found, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, found, err := LoadDir(dir); !errors.Is(err, ErrStateMissing) || found {
			t.Fatalf("LoadDir(missing) = %v, %v", found, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatal("LoadDir recreated the state file")
		}
	})
	t.Run("legacy without marker", func(t *testing.T) {
		legacy := t.TempDir()
		v1 := `{"Version":1,"Index":4,"Intentions":[{"ID":"a","SourceName":"web","DestinationName":"db","Action":"allow"}]}`
		if err := os.WriteFile(filepath.Join(legacy, fileName), []byte(v1), 0o600); err != nil {
			t.Fatal(err)
		}
		st, found, err := LoadDir(legacy)
		if err != nil || !found || st.Index != 4 || len(st.Intentions) != 1 {
			t.Fatalf("LoadDir(v1) = %+v, %v, %v", st, found, err)
		}
		if _, err := os.Stat(filepath.Join(legacy, MarkerName)); !os.IsNotExist(err) {
			t.Fatal("LoadDir wrote a marker")
		}
	})
}

func TestStateUpdateByID(t *testing.T) {
	st, web := mustUpsert(t, State{Index: 9}, ixn("web", "db", "allow"), false, t0)
	st, _ = mustUpsert(t, st, ixn("api", "db", "deny"), false, t0)
	before := deepCopy(st)
	t1 := t0.Add(time.Hour)

	in := ixn("*", "db", "DENY")
	in.Description = "nobody"
	next, up, err := st.UpdateByID(web.ID, in, t1, nil)
	if err != nil || up.ID != web.ID || up.SourceName != "*" || up.Action != ActionDeny || up.Precedence != 8 ||
		!up.CreatedAt.Equal(t0) || up.CreateIndex != web.CreateIndex || !up.UpdatedAt.Equal(t1) || up.ModifyIndex != 12 || next.Index != 12 {
		t.Fatalf("UpdateByID = %+v, %+v, %v", next, up, err)
	}
	if len(next.Intentions) != 2 || next.Intentions[1].ID != web.ID {
		t.Fatalf("UpdateByID state = %+v, want the wildcard source last", next.Intentions)
	}
	errRefused := errors.New("refused")
	for _, c := range []struct {
		name string
		id   string
		in   Intention
		pre  Precondition
		want error
	}{
		{"unknown ID", "nope", in, nil, ErrNotFound},
		{"destination change", web.ID, ixn("web", "cache", "allow"), nil, ErrInvalid},
		{"pair taken", web.ID, ixn("api", "db", "allow"), nil, ErrExists},
		{"other ID in body", web.ID, Intention{ID: "x", SourceName: "web", DestinationName: "db", Action: "allow"}, nil, ErrInvalid},
		{"refused", web.ID, in, func(Intention) error { return errRefused }, errRefused},
	} {
		if got, _, err := st.UpdateByID(c.id, c.in, t1, c.pre); !errors.Is(err, c.want) || !reflect.DeepEqual(got, before) {
			t.Errorf("%s: UpdateByID = %v, want %v and the state unchanged", c.name, err, c.want)
		}
	}
	if !reflect.DeepEqual(st, before) {
		t.Fatalf("receiver changed by UpdateByID: %+v", st)
	}
}
