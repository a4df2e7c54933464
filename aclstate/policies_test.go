package aclstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/acl"
)

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

// mustPolicy writes a policy or fails the test.
func mustPolicy(t *testing.T, s *EtcdStore, name, rules string) *acl.Policy {
	t.Helper()
	p, err := s.UpsertPolicy(ctxT(t, 10*time.Second), &acl.Policy{Name: name, Rules: rules})
	if err != nil {
		t.Fatalf("UpsertPolicy %s: %v", name, err)
	}
	return p
}

// A policy's indexes are its key's revisions; every write moves the ACL
// index; a missing policy is ErrNotFound.
func TestPolicyCRUD(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	if idx, err := s.Index(ctx); err != nil || idx != 0 {
		t.Fatalf("Index of an empty store = %d, %v; want 0", idx, err)
	}
	p, err := s.UpsertPolicy(ctx, &acl.Policy{Name: "readonly", Description: "d1", Rules: `node { policy = "read" }`,
		CreateIndex: 99, ModifyIndex: 99})
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := s.Index(ctx)
	if p.CreateIndex == 99 || p.CreateIndex != p.ModifyIndex || p.ModifyIndex != idx || idx == 0 {
		t.Fatalf("created policy indexes %d/%d, ACL index %d", p.CreateIndex, p.ModifyIndex, idx)
	}
	got, err := s.Policy(ctx, "readonly")
	if err != nil || *got != *p {
		t.Fatalf("Policy = %+v, %v; want %+v", got, err, p)
	}
	p2, err := s.UpsertPolicy(ctx, &acl.Policy{Name: "readonly", Description: "d2", Rules: `node { policy = "write" }`})
	if err != nil {
		t.Fatal(err)
	}
	if p2.CreateIndex != p.CreateIndex || p2.ModifyIndex <= p.ModifyIndex || p2.Description != "d2" {
		t.Fatalf("updated policy %+v, first %+v", p2, p)
	}
	if got, _ := s.Policy(ctx, "readonly"); *got != *p2 {
		t.Fatalf("Policy after update = %+v, want %+v", got, p2)
	}
	mustPolicy(t, s, "a-first", "")
	list, lidx, err := s.ListPolicies(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "a-first" || list[1].Name != "readonly" {
		t.Fatalf("ListPolicies = %v, %v", list, err)
	}
	if cur, _ := s.Index(ctx); lidx != cur || lidx <= p2.ModifyIndex {
		t.Fatalf("ListPolicies index %d, Index %d", lidx, cur)
	}
	if err := s.DeletePolicy(ctx, "readonly"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Index(ctx); cur <= lidx {
		t.Fatalf("Index %d did not move past %d on delete", cur, lidx)
	}
	_, err = s.Policy(ctx, "readonly")
	wantErr(t, "Policy after delete", err, acl.ErrNotFound)
	wantErr(t, "second delete", s.DeletePolicy(ctx, "readonly"), acl.ErrNotFound)
	_, err = s.Policy(ctx, "no/such")
	wantErr(t, "Policy of an invalid name", err, acl.ErrNotFound)
}

// Names that cannot be key segments, oversized fields and rules the
// injected validator refuses are ErrInvalid, and nothing is written.
func TestPolicyValidation(t *testing.T) {
	errRules := errors.New("bad rules at line 1")
	s := openTest(t, newClient(t), testPrefix(t), Options{ValidateRules: func(r string) error {
		if strings.Contains(r, "bogus") {
			return errRules
		}
		return nil
	}})
	ctx := ctxT(t, 10*time.Second)
	for _, p := range []*acl.Policy{
		nil,
		{Name: ""},
		{Name: "a/b"},
		{Name: ".."},
		{Name: "with space"},
		{Name: strings.Repeat("x", 129)},
		{Name: "ok", Description: strings.Repeat("d", 257)},
		{Name: "ok", Rules: "bogus"},
	} {
		_, err := s.UpsertPolicy(ctx, p)
		wantErr(t, fmt.Sprintf("UpsertPolicy(%+v)", p), err, acl.ErrInvalid)
	}
	_, err := s.UpsertPolicy(ctx, &acl.Policy{Name: "ok", Rules: "bogus"})
	wantErr(t, "rules refused", err, errRules)
	if idx, _ := s.Index(ctx); idx != 0 {
		t.Fatalf("refused writes moved the index to %d", idx)
	}
	mustPolicy(t, s, "ok", "fine")
	wantErr(t, "DeletePolicy of an invalid name", s.DeletePolicy(ctx, "a/b"), acl.ErrInvalid)
	// Without a validator any rules are written.
	mustPolicy(t, newStore(t), "ok", "bogus")
}

// Policies returns the named policies that exist, in order, each once,
// across more names than one transaction reads.
func TestPoliciesReader(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 30*time.Second)
	var names []string
	for i := range policiesPerTxn + 6 {
		names = append(names, mustPolicy(t, s, fmt.Sprintf("p%03d", i), "").Name)
	}
	ask := append([]string{"missing", "p001", "bad/name", "p001"}, names...)
	got, err := s.Policies(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(names) || got[0].Name != "p001" || got[1].Name != "p000" || got[len(got)-1].Name != names[len(names)-1] {
		t.Fatalf("Policies returned %d policies, first %s, want %d", len(got), got[0].Name, len(names))
	}
	if got, err := s.Policies(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("Policies(nil) = %v, %v", got, err)
	}
}

// A corrupt stored policy is an error of every read, never skipped.
func TestPolicyCorrupt(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	mustPolicy(t, s, "good", "")
	for _, val := range []string{"not json", `{"Name":"other"}`, `[]`, `{"Name":"bad","Rules":7}`} {
		put(t, s, policiesDir+"bad", val)
		_, err := s.Policy(ctx, "bad")
		wantErr(t, "Policy "+val, err, ErrCorrupt)
		_, _, err = s.ListPolicies(ctx)
		wantErr(t, "ListPolicies "+val, err, ErrCorrupt)
		_, err = s.Policies(ctx, []string{"good", "bad"})
		wantErr(t, "Policies "+val, err, ErrCorrupt)
	}
	// Overwriting repairs it.
	mustPolicy(t, s, "bad", "")
	if list, _, err := s.ListPolicies(ctx); err != nil || len(list) != 2 {
		t.Fatalf("ListPolicies after repair = %v, %v", list, err)
	}
}
