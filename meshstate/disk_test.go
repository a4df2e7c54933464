package meshstate

import (
	"errors"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

// While the disk check fails (an embedded member's disk nearly full) no
// write reaches etcd, and each says why.
func TestDiskCheckRefusesWrites(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	errFull := errors.New("disk nearly full")
	full := true
	s := Open(c, Options{Prefix: prefix, DiskCheck: func() error {
		if full {
			return errFull
		}
		return nil
	}})
	ctx := ctxT(t, 10*time.Second)
	rev := currentRev(t, c)
	in := catalog.ServiceInstance{ID: "i1", Name: "web", NodeID: "n1", AllocID: "a1"}
	if err := s.PutAlloc(ctx, "n1", "a1", []catalog.ServiceInstance{in}); !errors.Is(err, errFull) {
		t.Errorf("PutAlloc = %v, want the disk check's error", err)
	}
	if _, _, err := s.Intentions().Upsert(ctx, intention.Intention{SourceName: "a", DestinationName: "b", Action: intention.ActionDeny}, false); !errors.Is(err, errFull) {
		t.Errorf("intention upsert = %v, want the disk check's error", err)
	}
	if _, err := s.DeleteNode(ctx, "n1"); !errors.Is(err, errFull) {
		t.Errorf("DeleteNode = %v, want the disk check's error", err)
	}
	if got := currentRev(t, c); got != rev {
		t.Fatalf("etcd revision moved from %d to %d while the disk was full", rev, got)
	}
	full = false
	if err := s.PutAlloc(ctx, "n1", "a1", []catalog.ServiceInstance{in}); err != nil {
		t.Fatalf("PutAlloc after the disk recovered: %v", err)
	}
}
