package ca

import (
	"context"
	"testing"
)

// checkRootsIndex fails unless rs.Index is at least every root's
// ModifyIndex and above prev.
func checkRootsIndex(t *testing.T, what string, rs Roots, prev uint64) {
	t.Helper()
	for _, r := range rs.Roots {
		if rs.Index < r.ModifyIndex {
			t.Errorf("%s: Index %d below root %s's ModifyIndex %d", what, rs.Index, r.ID, r.ModifyIndex)
		}
	}
	if rs.Index <= prev {
		t.Errorf("%s: Index %d, want above %d", what, rs.Index, prev)
	}
}

// Roots.Index rises with every change of the root set, a dropped root
// that leaves every remaining root as it was too; a client agent's CA
// (remote mode) follows the servers' roots the same way.
func TestRootsIndexRisesOnDrop(t *testing.T) {
	server := newTestManager(t, Config{})
	remote := newTestManager(t, Config{Signer: server})
	first := server.Roots().Index
	checkRootsIndex(t, "server's first root", server.Roots(), 0)
	if err := server.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	two := server.Roots()
	checkRootsIndex(t, "server after a rotation", two, first)
	if len(two.Roots) != 2 {
		t.Fatalf("%d roots after a rotation, want 2", len(two.Roots))
	}

	if err := remote.SetRoots(two); err != nil {
		t.Fatal(err)
	}
	got := remote.Roots()
	checkRootsIndex(t, "client with two roots", got, 0)
	one := two
	one.Roots = two.Roots[1:] // the old root dropped, the new one unchanged
	if err := remote.SetRoots(one); err != nil {
		t.Fatal(err)
	}
	checkRootsIndex(t, "client after the old root was dropped", remote.Roots(), got.Index)
}
