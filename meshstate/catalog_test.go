package meshstate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

// regs are n instances of allocation allocID on nodeID.
func regs(nodeID, allocID string, names ...string) []catalog.ServiceInstance {
	var out []catalog.ServiceInstance
	for _, n := range names {
		out = append(out, catalog.ServiceInstance{ID: allocID + "-" + n, Name: n, Address: "127.0.0.1", Port: 8080,
			Tags: []string{"v1"}, Meta: map[string]string{"b": "2", "a": "1"}, NodeID: nodeID, AllocID: allocID,
			Healthy: true, Connect: true})
	}
	return out
}

func TestCatalogPutDeleteNodeRegs(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	puts := map[[2]string][]catalog.ServiceInstance{
		{"n1", "a1"}:  regs("n1", "a1", "web", "web-sidecar-proxy"),
		{"n1", "a2"}:  regs("n1", "a2", "db"),
		{"n2", "a3"}:  regs("n2", "a3", "api"),
		{"n10", "a4"}: regs("n10", "a4", "cache"), // "n1" is a prefix of its node ID
	}
	for k, insts := range puts {
		if err := s.PutAlloc(ctx, k[0], k[1], insts); err != nil {
			t.Fatalf("PutAlloc(%v): %v", k, err)
		}
	}
	got, err := s.NodeRegs(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]catalog.ServiceInstance{"a1": puts[[2]string{"n1", "a1"}], "a2": puts[[2]string{"n1", "a2"}]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeRegs(n1) = %+v\nwant %+v", got, want)
	}

	if err := s.DeleteAlloc(ctx, "n1", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAlloc(ctx, "n1", "a1"); err != nil {
		t.Fatalf("DeleteAlloc of an absent allocation: %v", err)
	}
	if got, _ := s.NodeRegs(ctx, "n1"); len(got) != 1 || got["a2"] == nil {
		t.Fatalf("NodeRegs(n1) after delete = %+v", got)
	}
	if err := s.PutAlloc(ctx, "n1", "a5", regs("n1", "a5", "x")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteNode(ctx, "n1"); err != nil || n != 2 {
		t.Fatalf("DeleteNode(n1) = %d, %v; want 2", n, err)
	}
	if got, err := s.NodeRegs(ctx, "n1"); err != nil || len(got) != 0 {
		t.Fatalf("NodeRegs(n1) after DeleteNode = %+v, %v", got, err)
	}
	for _, node := range []string{"n2", "n10"} {
		if got, _ := s.NodeRegs(ctx, node); len(got) != 1 {
			t.Fatalf("DeleteNode(n1) touched node %s: %+v", node, got)
		}
	}
	if n, err := s.DeleteNode(ctx, "n1"); err != nil || n != 0 {
		t.Fatalf("second DeleteNode(n1) = %d, %v", n, err)
	}
	// No registrations at all is a deregistration.
	if err := s.PutAlloc(ctx, "n2", "a3", nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.NodeRegs(ctx, "n2"); len(got) != 0 {
		t.Fatalf("PutAlloc with no instances left %+v", got)
	}
}

func TestCatalogPutValidation(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	long := strings.Repeat("x", maxSegment+1)
	mod := func(f func(*catalog.ServiceInstance)) []catalog.ServiceInstance {
		in := regs("n1", "a1", "web")
		f(&in[0])
		return in
	}
	for _, tc := range []struct {
		name        string
		node, alloc string
		insts       []catalog.ServiceInstance
	}{
		{"empty node", "", "a1", regs("", "a1", "web")},
		{"empty alloc", "n1", "", regs("n1", "", "web")},
		{"slash in node", "n/1", "a1", regs("n/1", "a1", "web")},
		{"slash in alloc", "n1", "a/1", regs("n1", "a/1", "web")},
		{"long node", long, "a1", regs(long, "a1", "web")},
		{"long alloc", "n1", long, regs("n1", long, "web")},
		{"no instance ID", "n1", "a1", mod(func(in *catalog.ServiceInstance) { in.ID = "" })},
		{"other node", "n1", "a1", mod(func(in *catalog.ServiceInstance) { in.NodeID = "n2" })},
		{"other alloc", "n1", "a1", mod(func(in *catalog.ServiceInstance) { in.AllocID = "a2" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.PutAlloc(ctx, tc.node, tc.alloc, tc.insts); !errors.Is(err, ErrInvalid) {
				t.Fatalf("PutAlloc = %v, want ErrInvalid", err)
			}
		})
	}
	if err := s.DeleteAlloc(ctx, "n1", "a/1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DeleteAlloc = %v, want ErrInvalid", err)
	}
	if _, err := s.DeleteNode(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DeleteNode(\"\") = %v, want ErrInvalid (it would delete every node)", err)
	}
	if _, err := s.NodeRegs(ctx, "a/b"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NodeRegs = %v, want ErrInvalid", err)
	}
	if n := countKeys(t, c, prefix, ""); n != 0 {
		t.Fatalf("%d keys written by rejected calls", n)
	}
	// The longest allowed ID works.
	ok := strings.Repeat("y", maxSegment)
	if err := s.PutAlloc(ctx, "n1", ok, regs("n1", ok, "web")); err != nil {
		t.Fatalf("PutAlloc with a %d-byte ID: %v", maxSegment, err)
	}
}

// TestCatalogIdenticalPutNoRevision: repeating a registration (anti-entropy)
// writes nothing; a change does.
func TestCatalogIdenticalPutNoRevision(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "web", "db")); err != nil {
		t.Fatal(err)
	}
	before := currentRev(t, c)
	for i := 0; i < 3; i++ {
		if err := s.PutAlloc(ctx, "n1", "a1", regs("n1", "a1", "web", "db")); err != nil {
			t.Fatal(err)
		}
	}
	if after := currentRev(t, c); after != before {
		t.Fatalf("identical puts moved the revision from %d to %d", before, after)
	}
	changed := regs("n1", "a1", "web", "db")
	changed[1].Healthy = false
	if err := s.PutAlloc(ctx, "n1", "a1", changed); err != nil {
		t.Fatal(err)
	}
	if after := currentRev(t, c); after != before+1 {
		t.Fatalf("a changed put moved the revision from %d to %d, want +1", before, after)
	}
	got, err := s.NodeRegs(ctx, "n1")
	if err != nil || !reflect.DeepEqual(got["a1"], changed) {
		t.Fatalf("NodeRegs = %+v, %v; want %+v", got, err, changed)
	}
}

// TestCatalogCorruptValue: an undecodable value shows up with nil
// instances, so a repair rewrites it.
func TestCatalogCorruptValue(t *testing.T) {
	c, prefix := newClient(t), testPrefix(t)
	s := openTest(t, c, prefix)
	ctx := ctxT(t, 20*time.Second)
	if _, err := c.Put(ctx, prefix+"catalog/n1/bad", "{not json"); err != nil {
		t.Fatal(err)
	}
	got, err := s.NodeRegs(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if insts, ok := got["bad"]; !ok || insts != nil {
		t.Fatalf("NodeRegs = %+v, want bad with nil instances", got)
	}
	if err := s.PutAlloc(ctx, "n1", "bad", regs("n1", "bad", "web")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.NodeRegs(ctx, "n1"); len(got["bad"]) != 1 {
		t.Fatalf("repair did not overwrite the corrupt value: %+v", got)
	}
}

// An external registration may not take the ID another external node's
// instance has, nor one of the IDs meshlet gives jobs' instances: the
// servers refuse it even when the calling agent's catalog view lagged.
func TestPutExternalKeepsOthersIDs(t *testing.T) {
	c := newClient(t)
	s := openTest(t, c, testPrefix(t))
	ctx := ctxT(t, 20*time.Second)
	ext := func(node, id string) catalog.ServiceInstance {
		return catalog.ServiceInstance{ID: id, Name: "legacy", NodeID: catalog.ExternalNodePrefix + node, AllocID: "svc-" + id}
	}
	if err := s.PutExternal(ctx, ext("a", "legacy")); err != nil {
		t.Fatal(err)
	}
	revision := func() int64 {
		resp, err := c.Get(ctx, "no-such-key")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := revision()
	if err := s.PutExternal(ctx, ext("a", "legacy")); err != nil {
		t.Fatalf("re-registering on the same node: %v", err)
	}
	if after := revision(); after != before {
		t.Fatalf("re-registering the same instance wrote (revision %d -> %d); anti-entropy must cost nothing", before, after)
	}
	if err := s.PutExternal(ctx, ext("b", "legacy")); !errors.Is(err, catalog.ErrIDTaken) || !strings.Contains(err.Error(), "on node a;") {
		t.Fatalf("the same ID on another node: %v, want ErrIDTaken naming node a", err)
	}
	if err := s.PutExternal(ctx, ext("b", "_nomad-task-x-group-web-web-80")); !errors.Is(err, catalog.ErrIDTaken) {
		t.Fatalf("a job instance's ID: %v, want ErrIDTaken", err)
	}
	regs, err := s.NodeRegs(ctx, catalog.ExternalNodePrefix+"b")
	if err != nil || len(regs) != 0 {
		t.Fatalf("node b's registrations after the refusals = %v, %v; want none", regs, err)
	}
	// One stored before the rule can still be removed.
	old := ext("c", "_nomad-task-y-group-web-web-80")
	if err := s.PutAlloc(ctx, old.NodeID, old.AllocID, []catalog.ServiceInstance{old}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExternal(ctx, old, nil); err != nil {
		t.Fatalf("DeleteExternal of a _nomad- ID stored before the rule: %v", err)
	}
	if err := s.DeleteExternal(ctx, ext("a", "legacy"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutExternal(ctx, ext("b", "legacy")); err != nil {
		t.Fatalf("the ID once node a deregistered it: %v", err)
	}
}

// Two registrations of one ID on two external nodes at the same time:
// the one whose check ran before the other's write landed reads again and
// is refused, so only one node ever holds the ID.
func TestPutExternalRaceKeepsOneOwner(t *testing.T) {
	s := openTest(t, newClient(t), testPrefix(t))
	ctx := ctxT(t, 20*time.Second)
	ext := func(node string) catalog.ServiceInstance {
		return catalog.ServiceInstance{ID: "legacy", Name: "legacy", NodeID: catalog.ExternalNodePrefix + node, AllocID: "svc-legacy"}
	}
	checks := 0
	s.externalChecked = func() {
		checks++
		if checks == 1 { // b registers between a's check and a's write
			if err := s.PutExternal(ctx, ext("b")); err != nil {
				t.Errorf("b's registration: %v", err)
			}
		}
	}
	if err := s.PutExternal(ctx, ext("a")); !errors.Is(err, catalog.ErrIDTaken) || !strings.Contains(err.Error(), "on node b;") {
		t.Fatalf("a's registration after b's landed in between: %v, want ErrIDTaken naming node b", err)
	}
	if regs, err := s.NodeRegs(ctx, catalog.ExternalNodePrefix+"a"); err != nil || len(regs) != 0 {
		t.Fatalf("node a's registrations = %v, %v; want none", regs, err)
	}
	if checks != 2 {
		t.Fatalf("checks = %d, want 2 (a's, b's; a refused on its second read before another check)", checks)
	}
}
