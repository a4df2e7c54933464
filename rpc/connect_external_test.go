package rpc

import (
	"errors"
	"testing"
	"time"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

// A client agent stores /v1/catalog/register's registrations through a
// server: only on an external node, only plain services, and with ACLs
// only with the caller's node write and service write.
func TestConnectExternal(t *testing.T) {
	m := newMeshFixture(t)
	ext := m.c.ExternalCatalog()
	inst := catalog.ServiceInstance{ID: "db-1", Name: "db", Address: "192.0.2.10", Port: 5432, Healthy: true,
		NodeID: catalog.ExternalNodePrefix + "legacy", AllocID: "svc-db-1"}
	if err := ext.PutExternal(ctxT(t, 5*time.Second), inst); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.f.reg(inst.NodeID, inst.AllocID); !ok || len(got) != 1 || got[0].Name != "db" {
		t.Fatalf("stored = %+v, %v", got, ok)
	}
	// The servers refuse an ID another external node's instance has,
	// and the sentinel comes back across the call (409 id_taken).
	other := inst
	other.NodeID = catalog.ExternalNodePrefix + "other"
	if err := ext.PutExternal(ctxT(t, 5*time.Second), other); !errors.Is(err, catalog.ErrIDTaken) {
		t.Errorf("PutExternal of another node's ID: %v, want ErrIDTaken", err)
	}
	if _, ok := m.f.reg(other.NodeID, other.AllocID); ok {
		t.Error("the refused registration was stored")
	}
	own := inst
	own.NodeID = "node-1" // the node's own allocations go through PutAllocServices only
	if err := ext.PutExternal(ctxT(t, 5*time.Second), own); !errors.Is(err, ErrBadRequest) {
		t.Errorf("PutExternal on the node's own ID: %v", err)
	}
	proxy := inst
	proxy.Kind = catalog.KindConnectProxy
	if err := ext.PutExternal(ctxT(t, 5*time.Second), proxy); !errors.Is(err, ErrBadRequest) {
		t.Errorf("PutExternal of a proxy: %v", err)
	}
	if err := ext.DeleteExternal(ctxT(t, 5*time.Second), inst, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.f.reg(inst.NodeID, inst.AllocID); ok {
		t.Fatal("still stored after DeleteExternal")
	}

	m.s.cfg.Tokens = secretACLs{
		"db-svc":  `service "db" { policy = "write" }`,
		"node-db": "node { policy = \"write\" }\nservice \"db\" { policy = \"write\" }",
	}
	if err := ext.PutExternal(as(t, "db-svc"), inst); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("PutExternal without node write: %v", err)
	}
	if err := ext.PutExternal(as(t, "node-db"), inst); err != nil {
		t.Errorf("PutExternal with node and service write: %v", err)
	}
	unnamed := inst
	unnamed.Name = ""
	if err := ext.DeleteExternal(as(t, "node-db"), unnamed, nil); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("DeleteExternal of an unnamed service without management: %v", err)
	}
	// Write on another service does not reach db's registration, whatever
	// name the caller sends for it.
	m.s.cfg.Tokens = secretACLs{
		"node-db":  "node { policy = \"write\" }\nservice \"db\" { policy = \"write\" }",
		"node-foo": "node { policy = \"write\" }\nservice \"foo\" { policy = \"write\" }",
	}
	posing := inst
	posing.Name = "foo"
	if err := ext.DeleteExternal(as(t, "node-foo"), posing, nil); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("DeleteExternal of db's registration sent as foo: %v", err)
	}
	if err := ext.PutExternal(as(t, "node-foo"), posing); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("PutExternal over db's registration as foo: %v", err)
	}
	if got, ok := m.f.reg(inst.NodeID, inst.AllocID); !ok || len(got) != 1 || got[0].Name != "db" {
		t.Errorf("db's registration after the refused writes = %+v, %v", got, ok)
	}
	if err := ext.DeleteExternal(as(t, "node-db"), inst, nil); err != nil {
		t.Errorf("DeleteExternal with node and service write: %v", err)
	}
}

// A node running a terminating gateway gets leaves signed for the services
// the gateway links (it presents their identity), and no others.
func TestConnectSignLinkedService(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	gw := &structs.Service{Name: "tgw", Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
		Terminating: &structs.ConsulTerminatingConfigEntry{Services: []*structs.ConsulLinkedService{{Name: "legacy-db"}}}}}}
	job := &structs.Job{ID: "tgw", TaskGroups: []*structs.TaskGroup{{Name: "gw", Services: []*structs.Service{gw}}}}
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", TaskGroup: "gw", Job: job,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})
	for _, svc := range []string{"tgw", "legacy-db"} {
		csr, _ := makeCSR(t, "")
		if _, err := m.c.SignCSR(ctx, svc, csr); err != nil {
			t.Errorf("SignCSR(%s): %v", svc, err)
		}
	}
	csr, _ := makeCSR(t, "")
	_, err := m.c.SignCSR(ctx, "billing", csr)
	wantErr(t, "sign a service the gateway does not link", err, ErrForbidden)
}
