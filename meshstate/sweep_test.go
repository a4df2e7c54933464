package meshstate

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

func TestSweepNodesRemovesNodesNotUp(t *testing.T) {
	c := newClient(t)
	s := openTest(t, c, testPrefix(t))
	ctx := ctxT(t, 10*time.Second)
	for _, r := range []struct{ node, alloc string }{{"up1", "a1"}, {"down1", "a2"}, {"down1", "a3"}, {"unknown", "a4"}} {
		if err := s.PutAlloc(ctx, r.node, r.alloc, []catalog.ServiceInstance{inst(r.node, r.alloc, r.alloc+"-i")}); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.NodeIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"down1", "unknown", "up1"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("NodeIDs = %v, want %v", ids, want)
	}

	if _, err := s.SweepNodes(ctx, func(context.Context) (map[string]bool, error) { return nil, errors.New("no state") }); err == nil {
		t.Fatal("a failed node listing removed nothing but returned no error")
	}
	if n, _ := s.NodeIDs(ctx); len(n) != 3 {
		t.Fatalf("registrations removed though the node listing failed: %v", n)
	}

	removed, err := s.SweepNodes(ctx, func(context.Context) (map[string]bool, error) {
		return map[string]bool{"up1": true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"down1": 2, "unknown": 1}; !reflect.DeepEqual(removed, want) {
		t.Fatalf("removed = %v, want %v", removed, want)
	}
	regs, err := s.NodeRegs(ctx, "up1")
	if err != nil || len(regs) != 1 {
		t.Fatalf("the up node's registrations = %v, %v; want kept", regs, err)
	}
	if ids, _ := s.NodeIDs(ctx); !reflect.DeepEqual(ids, []string{"up1"}) {
		t.Fatalf("NodeIDs after the sweep = %v", ids)
	}
	// Nothing to sweep: up is not even asked.
	s2 := openTest(t, c, testPrefix(t))
	if _, err := s2.SweepNodes(ctx, func(context.Context) (map[string]bool, error) {
		t.Fatal("up asked without registrations")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Services registered through /v1/catalog/register live on an external
// node no agent runs: the sweep keeps them.
func TestSweepNodesKeepsExternalNodes(t *testing.T) {
	c := newClient(t)
	s := openTest(t, c, testPrefix(t))
	ctx := ctxT(t, 10*time.Second)
	ext := catalog.ExternalNodePrefix + "legacy"
	for _, node := range []string{ext, "down1"} {
		if err := s.PutAlloc(ctx, node, "svc-db", []catalog.ServiceInstance{inst(node, "svc-db", "db")}); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := s.SweepNodes(ctx, func(context.Context) (map[string]bool, error) { return map[string]bool{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"down1": 1}; !reflect.DeepEqual(removed, want) {
		t.Fatalf("removed = %v, want %v", removed, want)
	}
	if ids, _ := s.NodeIDs(ctx); !reflect.DeepEqual(ids, []string{ext}) {
		t.Fatalf("NodeIDs after the sweep = %v", ids)
	}
}
