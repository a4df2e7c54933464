package meshstate

import (
	"errors"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

var errRefusedByPre = errors.New("refused by the precondition")

// DeleteExternal judges its precondition on the registration it deletes,
// in the same compare-and-swap: a refusal removes nothing, a registration
// replaced between the check and the delete is judged again, and nothing
// stored is no error (the precondition is not called).
func TestDeleteExternalJudged(t *testing.T) {
	s := openTest(t, newClient(t), testPrefix(t))
	ctx := ctxT(t, 20*time.Second)
	ext := func(name string) catalog.ServiceInstance {
		return catalog.ServiceInstance{ID: "legacy", Name: name, NodeID: catalog.ExternalNodePrefix + "a", AllocID: "svc-legacy"}
	}
	if err := s.PutExternal(ctx, ext("db")); err != nil {
		t.Fatal(err)
	}
	var judged []string
	onlyWeb := func(stored []catalog.ServiceInstance) error {
		for _, in := range stored {
			judged = append(judged, in.Name)
			if in.Name != "web" {
				return errRefusedByPre
			}
		}
		return nil
	}
	stored := func() int {
		regs, err := s.NodeRegs(ctx, catalog.ExternalNodePrefix+"a")
		if err != nil {
			t.Fatal(err)
		}
		return len(regs)
	}
	if err := s.DeleteExternal(ctx, ext("web"), onlyWeb); !errors.Is(err, errRefusedByPre) {
		t.Fatalf("delete of db's registration sent as web: %v, want the precondition's error", err)
	}
	if stored() != 1 {
		t.Fatal("the refused delete removed the registration")
	}
	// Replaced by db between the check (on web) and the delete: judged again.
	if err := s.PutExternal(ctx, ext("web")); err != nil {
		t.Fatal(err)
	}
	judged = nil
	replaced := false
	err := s.DeleteExternal(ctx, ext("web"), func(st []catalog.ServiceInstance) error {
		if !replaced {
			replaced = true
			if err := s.PutExternal(ctx, ext("db")); err != nil {
				t.Errorf("replacing the registration: %v", err)
			}
		}
		return onlyWeb(st)
	})
	if !errors.Is(err, errRefusedByPre) || len(judged) != 2 || judged[1] != "db" {
		t.Fatalf("delete of a registration replaced by db meanwhile: %v, judged %v; want refused on db", err, judged)
	}
	if stored() != 1 {
		t.Fatal("the delete removed the registration db replaced")
	}
	unknown := catalog.ServiceInstance{ID: "nope", NodeID: catalog.ExternalNodePrefix + "a", AllocID: "svc-nope"}
	if err := s.DeleteExternal(ctx, unknown, func([]catalog.ServiceInstance) error {
		t.Error("precondition called for nothing stored")
		return errRefusedByPre
	}); err != nil {
		t.Fatalf("unknown ID: %v", err)
	}
	if err := s.PutExternal(ctx, ext("web")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExternal(ctx, ext("web"), onlyWeb); err != nil {
		t.Fatalf("allowed delete: %v", err)
	}
	if stored() != 0 {
		t.Fatal("the allowed delete left the registration")
	}
}
