package intention

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func ixn(src, dst, action string) Intention {
	return Intention{SourceName: src, DestinationName: dst, Action: action}
}

func newStore(t *testing.T, dir string, defaultAllow bool, ixns ...Intention) *Store {
	t.Helper()
	s, err := New(dir, defaultAllow, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, in := range ixns {
		if _, err := s.Upsert(in, false); err != nil {
			t.Fatalf("Upsert(%s): %v", in, err)
		}
	}
	return s
}

func TestPrecedence(t *testing.T) {
	cases := []struct {
		src, dst string
		want     int
	}{
		{"web", "db", 9},
		{"*", "db", 8},
		{"web", "*", 6},
		{"*", "*", 5},
	}
	s := newStore(t, "", false)
	for _, tc := range cases {
		got, err := s.Upsert(ixn(tc.src, tc.dst, ActionAllow), false)
		if err != nil {
			t.Fatal(err)
		}
		if got.Precedence != tc.want {
			t.Errorf("%s => %s: precedence %d, want %d", tc.src, tc.dst, got.Precedence, tc.want)
		}
	}
	var order []int
	for _, ix := range s.List() {
		order = append(order, ix.Precedence)
	}
	if !reflect.DeepEqual(order, []int{9, 8, 6, 5}) {
		t.Errorf("List order by precedence = %v", order)
	}
}

func TestCheck(t *testing.T) {
	type check struct {
		src, dst string
		allowed  bool
		matched  string // "" = default policy
	}
	cases := []struct {
		name         string
		defaultAllow bool
		ixns         []Intention
		checks       []check
	}{
		{"exact allow, default deny", false, []Intention{ixn("web", "db", "allow")}, []check{
			{"web", "db", true, "web => db (allow)"},
			{"api", "db", false, ""},
		}},
		{"default allow, nothing defined", true, nil, []check{{"web", "db", true, ""}}},
		{"exact beats wildcard source", false, []Intention{ixn("*", "db", "deny"), ixn("web", "db", "allow")}, []check{
			{"web", "db", true, "web => db (allow)"},
			{"api", "db", false, "* => db (deny)"},
		}},
		{"wildcard source beats wildcard destination", true, []Intention{ixn("web", "*", "deny"), ixn("*", "db", "allow")}, []check{
			{"web", "db", true, "* => db (allow)"},
			{"web", "cache", false, "web => * (deny)"},
			{"api", "cache", true, ""},
		}},
		{"wildcard destination beats catch-all", false, []Intention{ixn("*", "*", "deny"), ixn("web", "*", "allow")}, []check{
			{"web", "anything", true, "web => * (allow)"},
			{"api", "anything", false, "* => * (deny)"},
		}},
		{"full matrix", true, []Intention{ixn("*", "*", "allow"), ixn("web", "*", "deny"), ixn("*", "db", "allow"), ixn("web", "db", "deny")}, []check{
			{"web", "db", false, "web => db (deny)"},
			{"api", "db", true, "* => db (allow)"},
			{"web", "cache", false, "web => * (deny)"},
			{"api", "cache", true, "* => * (allow)"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, "", tc.defaultAllow, tc.ixns...)
			for _, c := range tc.checks {
				allowed, m := s.Check(c.src, c.dst)
				got := ""
				if m != nil {
					got = m.String()
				}
				if allowed != c.allowed || got != c.matched {
					t.Errorf("Check(%s, %s) = %v, %q; want %v, %q", c.src, c.dst, allowed, got, c.allowed, c.matched)
				}
			}
		})
	}
}

func TestMatch(t *testing.T) {
	s := newStore(t, "", false, ixn("*", "*", "allow"), ixn("web", "db", "allow"), ixn("*", "db", "deny"), ixn("api", "db", "allow"), ixn("web", "*", "deny"))
	names := func(list []Intention) []string {
		out := []string{}
		for _, ix := range list {
			out = append(out, ix.SourceName+">"+ix.DestinationName)
		}
		return out
	}
	cases := []struct {
		by, name string
		want     []string
	}{
		{"destination", "db", []string{"api>db", "web>db", "*>db", "web>*", "*>*"}},
		{"destination", "cache", []string{"web>*", "*>*"}},
		{"source", "web", []string{"web>db", "*>db", "web>*", "*>*"}},
		{"source", "other", []string{"*>db", "*>*"}},
		{"sideways", "web", []string{}},
	}
	for _, tc := range cases {
		if got := names(s.Match(tc.by, tc.name)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Match(%s, %s) = %v, want %v", tc.by, tc.name, got, tc.want)
		}
	}
}

func TestUpsertExistsAndReplace(t *testing.T) {
	s := newStore(t, "", false)
	calls := 0
	defer s.Subscribe(func() { calls++ })()
	first, err := s.Upsert(ixn("web", "db", "allow"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ixn("web", "db", "deny"), false); !errors.Is(err, ErrExists) {
		t.Fatalf("want ErrExists, got %v", err)
	}
	if got, _ := s.Get("web", "db"); got.Action != "allow" || calls != 1 {
		t.Fatalf("rejected upsert changed the store: %+v, %d notifications", got, calls)
	}
	upd := ixn("web", "db", "DENY")
	upd.Description = "lock down"
	second, err := s.Upsert(upd, true)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID || !second.CreatedAt.Equal(first.CreatedAt) || second.CreateIndex != first.CreateIndex ||
		second.ModifyIndex <= first.ModifyIndex || second.Action != "deny" || second.Description != "lock down" {
		t.Fatalf("replace: %+v (first %+v)", second, first)
	}
	if byID, err := s.GetByID(first.ID); err != nil || byID.Action != "deny" {
		t.Fatalf("GetByID = %+v, %v", byID, err)
	}
	roundTrip := second
	roundTrip.Action = "allow"
	if _, err := s.Upsert(roundTrip, true); err != nil {
		t.Fatalf("upsert with its own ID: %v", err)
	}
	if calls != 3 {
		t.Fatalf("subscriber called %d times, want 3", calls)
	}
}

func TestInvalidChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("web", "db", "allow"))
	before, index := s.List(), s.Index()
	fileBefore, _ := os.ReadFile(filepath.Join(dir, fileName))
	withID := ixn("api", "db", "allow")
	withID.ID = "9d1b3c3e-0000-4000-8000-000000000000"
	cases := []struct {
		name string
		in   Intention
	}{
		{"partial wildcard source", ixn("web*", "db", "allow")},
		{"partial wildcard destination", ixn("web", "d*", "allow")},
		{"empty source", ixn("", "db", "allow")},
		{"empty destination", ixn("web", "", "allow")},
		{"bad action", ixn("web", "db", "maybe")},
		{"empty action", ixn("web", "db", "")},
		{"other namespace", Intention{SourceNS: "team", SourceName: "web", DestinationName: "db", Action: "allow"}},
		{"other source type", Intention{SourceName: "web", DestinationName: "db", Action: "allow", SourceType: "external-uri"}},
		{"foreign ID", withID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Upsert(tc.in, true); !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
		})
	}
	for _, err := range []error{s.Delete("web", "cache"), s.DeleteByID("nope")} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("want ErrNotFound, got %v", err)
		}
	}
	if _, err := s.Get("web", "cache"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: want ErrNotFound, got %v", err)
	}
	fileAfter, _ := os.ReadFile(filepath.Join(dir, fileName))
	if !reflect.DeepEqual(s.List(), before) || s.Index() != index || !bytes.Equal(fileBefore, fileAfter) {
		t.Fatalf("rejected input changed the store")
	}
}

func TestPersistenceReload(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("web", "db", "allow"), ixn("*", "db", "deny"), ixn("api", "*", "allow"))
	if err := s.Delete("api", "*"); err != nil {
		t.Fatal(err)
	}
	web, _ := s.Get("web", "db")
	if err := s.DeleteByID(web.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ixn("web", "db", "deny"), false); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, fileName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("intentions file: %v, mode %v", err, info.Mode())
	}
	r := newStore(t, dir, false)
	if !reflect.DeepEqual(r.List(), s.List()) || r.Index() != s.Index() {
		t.Fatalf("reloaded %+v (index %d), want %+v (index %d)", r.List(), r.Index(), s.List(), s.Index())
	}
	if allowed, m := r.Check("web", "db"); allowed || m == nil || m.Precedence != 9 {
		t.Fatalf("reloaded Check = %v, %+v", allowed, m)
	}
}

func TestPersistFailureChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ixn")
	s := newStore(t, dir, false, ixn("web", "db", "allow"))
	before := s.List()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ixn("api", "db", "allow"), false); err == nil {
		t.Fatal("want a persistence error")
	}
	if err := s.Delete("web", "db"); err == nil {
		t.Fatal("want a persistence error")
	}
	if !reflect.DeepEqual(s.List(), before) {
		t.Fatalf("failed writes changed the store: %+v", s.List())
	}
}

func TestLoadRejectsBadFile(t *testing.T) {
	cases := map[string]string{
		"not json":      "{",
		"bad version":   `{"Version":7}`,
		"invalid entry": `{"Version":1,"Intentions":[{"ID":"a","SourceName":"we*","DestinationName":"db","Action":"allow"}]}`,
		"duplicate":     `{"Version":1,"Intentions":[{"ID":"a","SourceName":"web","DestinationName":"db","Action":"allow"},{"ID":"b","SourceName":"web","DestinationName":"db","Action":"deny"}]}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, fileName), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := New(dir, false, nil); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}
