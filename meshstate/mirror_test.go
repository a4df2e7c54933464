package meshstate

import (
	"testing"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

func inst(node, alloc, id string) catalog.ServiceInstance {
	return catalog.ServiceInstance{ID: id, Name: "svc-" + id, NodeID: node, AllocID: alloc, Address: "10.0.0.1", Port: 21000, Healthy: true}
}

func catalogIDs(c *catalog.Catalog) []string {
	var out []string
	for _, i := range c.All() {
		out = append(out, i.ID)
	}
	return out
}

func TestMirrorAppliesOtherNodesAndTracksOwn(t *testing.T) {
	cat := catalog.New()
	ix, err := intention.New("", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var roots []ca.Roots
	m := NewMirror(MirrorConfig{Catalog: cat, Intentions: ix, SelfNode: "n1", OnRoots: func(r ca.Roots) { roots = append(roots, r) }})
	owns := 0
	m.OnOwnChange(func() { owns++ })

	deny := intention.State{Index: 3, Intentions: []intention.Intention{{ID: "3f0c2f5e-0d4c-4a43-9d55-1d4bd0a1c001", SourceName: "a", DestinationName: "b", Action: intention.ActionDeny}}}
	err = m.Apply(Batch{Revision: 10, Reset: true, Intentions: &deny, Roots: &ca.Roots{TrustDomain: "x.meshlet", ActiveRootID: "r1"},
		Allocs: []AllocRegs{
			{NodeID: "n1", AllocID: "own", Instances: []catalog.ServiceInstance{inst("n1", "own", "o1")}},
			{NodeID: "n2", AllocID: "a2", Instances: []catalog.ServiceInstance{inst("n2", "a2", "i2"), inst("n2", "a2", "i2b")}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Ready():
	default:
		t.Fatal("mirror not ready after a reset")
	}
	if got := catalogIDs(cat); len(got) != 2 || got[0] != "i2" || got[1] != "i2b" {
		t.Fatalf("catalog after reset = %v, want the other node's i2 and i2b only (own registrations come from the registrar)", got)
	}
	if own := m.OwnRegs(); own["own"] != Fingerprint([]catalog.ServiceInstance{inst("n1", "own", "o1")}) || owns != 1 {
		t.Fatalf("own registrations = %v (%d notifications)", own, owns)
	}
	if ok, _ := ix.Check("a", "b"); ok || len(roots) != 1 || roots[0].ActiveRootID != "r1" {
		t.Fatalf("intentions or roots not applied: allowed=%v roots=%v", ok, roots)
	}

	// A change: one instance of a2 goes, a3 arrives; a keepalive changes nothing.
	_ = m.Apply(Batch{Revision: 0})
	_ = m.Apply(Batch{Revision: 11, Allocs: []AllocRegs{
		{NodeID: "n2", AllocID: "a2", Instances: []catalog.ServiceInstance{inst("n2", "a2", "i2")}},
		{NodeID: "n3", AllocID: "a3", Instances: []catalog.ServiceInstance{inst("n3", "a3", "i3")}},
	}})
	if got := catalogIDs(cat); len(got) != 2 || got[0] != "i2" || got[1] != "i3" || m.Revision() != 11 {
		t.Fatalf("catalog after change = %v at revision %d", got, m.Revision())
	}
	// The servers dropped this node (it was down): the registrar hears it.
	_ = m.Apply(Batch{Revision: 12, Allocs: []AllocRegs{{NodeID: "n1", AllocID: "own"}}})
	if len(m.OwnRegs()) != 0 || owns != 2 {
		t.Fatalf("own registrations after delete = %v (%d notifications)", m.OwnRegs(), owns)
	}
	// A new reset without a3 removes it (missed while reconnecting).
	_ = m.Apply(Batch{Revision: 20, Reset: true, Allocs: []AllocRegs{{NodeID: "n2", AllocID: "a2", Instances: []catalog.ServiceInstance{inst("n2", "a2", "i2")}}}})
	if got := catalogIDs(cat); len(got) != 1 || got[0] != "i2" {
		t.Fatalf("catalog after second reset = %v, want [i2]", got)
	}
}

// An identical re-delivery (a reset after a reconnect) does not touch the
// catalog: proxies are not pushed new config for nothing.
func TestMirrorIdenticalResetKeepsCatalogIndex(t *testing.T) {
	cat := catalog.New()
	m := NewMirror(MirrorConfig{Catalog: cat})
	b := Batch{Revision: 5, Reset: true, Allocs: []AllocRegs{{NodeID: "n2", AllocID: "a2", Instances: []catalog.ServiceInstance{inst("n2", "a2", "i2")}}}}
	_ = m.Apply(b)
	idx := cat.Index()
	b.Revision = 9
	_ = m.Apply(b)
	if cat.Index() != idx {
		t.Fatalf("catalog index moved from %d to %d on an identical reset", idx, cat.Index())
	}
}
