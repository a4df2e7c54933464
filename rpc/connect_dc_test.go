package rpc

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/structs"
)

// A node gets identities of its own datacenter: the CA signs a CSR for
// dc2 from a dc2 node (the leaf names dc2), and refuses it (403) from a
// node in dc1.
func TestConnectSignCSROwnDatacenter(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	tg := &structs.TaskGroup{Name: "g", Services: []*structs.Service{{Name: "api"}}, Tasks: []*structs.Task{{Name: "t"}}}
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", TaskGroup: "g", Job: &structs.Job{ID: "j", TaskGroups: []*structs.TaskGroup{tg}},
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})
	dc2 := ca.SpiffeID{TrustDomain: m.f.ca.TrustDomain(), Namespace: ca.DefaultNamespace, Datacenter: "dc2", Service: "api"}.URI()

	if err := m.c.RegisterNode(ctx, &structs.Node{ID: "node-1", Datacenter: "dc1"}); err != nil {
		t.Fatal(err)
	}
	csr, _ := makeCSR(t, dc2)
	_, err := m.c.SignCSR(ctx, "api", csr)
	wantErr(t, "dc2 CSR from a dc1 node", err, ErrForbidden)

	if err := m.c.RegisterNode(ctx, &structs.Node{ID: "node-1", Datacenter: "dc2"}); err != nil {
		t.Fatal(err)
	}
	signed, err := m.c.SignCSR(ctx, "api", csr)
	if err != nil {
		t.Fatalf("dc2 CSR from a dc2 node: %v", err)
	}
	block, _ := pem.Decode([]byte(signed.CertChainPEM))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil || len(leaf.URIs) != 1 || leaf.URIs[0].String() != dc2 {
		t.Fatalf("leaf = %v, %v; want %s", leaf, err, dc2)
	}
}
