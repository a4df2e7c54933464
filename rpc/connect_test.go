package rpc

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// A node registers services only for its own allocations, each instance
// naming it and the allocation; it deletes only under its own node key.
func TestConnectAllocRegistrations(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1"})
	m.b.addAlloc(&structs.Allocation{ID: "a2", NodeID: "node-2"})

	mine := []catalog.ServiceInstance{inst("node-1", "a1", "web"), inst("node-1", "a1", "web-sidecar-proxy")}
	if err := m.c.PutAllocServices(ctx, "a1", mine); err != nil {
		t.Fatalf("PutAllocServices(a1): %v", err)
	}
	if got, ok := m.f.reg("node-1", "a1"); !ok || !reflect.DeepEqual(got, mine) {
		t.Fatalf("stored node-1/a1 = %+v, want %+v", got, mine)
	}
	for _, tc := range []struct {
		name, alloc string
		insts       []catalog.ServiceInstance
	}{
		{"another node's allocation", "a2", []catalog.ServiceInstance{inst("node-1", "a2", "web")}},
		{"another node's allocation, instances naming it", "a2", []catalog.ServiceInstance{inst("node-2", "a2", "web")}},
		{"instance naming another node", "a1", []catalog.ServiceInstance{inst("node-1", "a1", "web"), inst("node-2", "a1", "db")}},
		{"instance naming another allocation", "a1", []catalog.ServiceInstance{inst("node-1", "a2", "web")}},
		{"unknown allocation", "gone", []catalog.ServiceInstance{inst("node-1", "gone", "web")}},
	} {
		err := m.c.PutAllocServices(ctx, tc.alloc, tc.insts)
		wantErr(t, tc.name, err, ErrForbidden)
	}
	if _, ok := m.f.reg("node-1", "a2"); ok {
		t.Fatal("a refused registration was stored under node-1/a2")
	}
	if _, ok := m.f.reg("node-2", "a2"); ok {
		t.Fatal("a refused registration was stored under node-2/a2")
	}
	if got, _ := m.f.reg("node-1", "a1"); !reflect.DeepEqual(got, mine) {
		t.Fatalf("node-1/a1 changed by refused calls: %+v", got)
	}

	// node-1 deleting a2 touches only node-1/a2, never node-2's key.
	m.f.set("node-2", "a2", []catalog.ServiceInstance{inst("node-2", "a2", "db")})
	if err := m.c.DeleteAllocServices(ctx, "a2"); err != nil {
		t.Fatalf("DeleteAllocServices(a2), absent under node-1: %v", err)
	}
	if _, ok := m.f.reg("node-2", "a2"); !ok {
		t.Fatal("node-1 deleted node-2's registration")
	}
	// The allocation may be gone from the state already.
	if err := m.c.DeleteAllocServices(ctx, "a1"); err != nil {
		t.Fatalf("DeleteAllocServices(a1): %v", err)
	}
	if _, ok := m.f.reg("node-1", "a1"); ok {
		t.Fatal("node-1/a1 still registered after delete")
	}

	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"malformed body", http.MethodPut, pathConnectAlloc + "a1", `{"Instances": [`, http.StatusBadRequest},
		{"trailing data", http.MethodPut, pathConnectAlloc + "a1", `{"Instances": []} {}`, http.StatusBadRequest},
		{"slash in the allocation ID", http.MethodPut, pathConnectAlloc + "a1%2Fx", `{"Instances": []}`, http.StatusBadRequest},
		{"slash in a deleted allocation ID", http.MethodDelete, pathConnectAlloc + "..%2Fnode-2%2Fa2", "", http.StatusBadRequest},
	} {
		if got := rawStatus(t, m, tc.method, tc.path, tc.body, "s1"); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if _, ok := m.f.reg("node-2", "a2"); !ok {
		t.Fatal("a malformed delete removed node-2's registration")
	}
}

// The servers sign a CSR only for a service that one of the node's
// running allocations declares (group or task service).
func TestConnectSignCSR(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	job := func(group string, services ...string) *structs.Job {
		tg := &structs.TaskGroup{Name: group, Services: []*structs.Service{{Name: services[0]}},
			Tasks: []*structs.Task{{Name: "t", Services: []*structs.Service{{Name: services[1]}}}}}
		return &structs.Job{ID: group, TaskGroups: []*structs.TaskGroup{tg}}
	}
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", TaskGroup: "g", Job: job("g", "web", "api"),
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})
	m.b.addAlloc(&structs.Allocation{ID: "a2", NodeID: "node-1", TaskGroup: "g", Job: job("g", "db", "db-task"),
		DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusRunning})
	m.b.addAlloc(&structs.Allocation{ID: "a3", NodeID: "node-1", TaskGroup: "g", Job: job("g", "cache", "cache-task"),
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusComplete})
	m.b.addAlloc(&structs.Allocation{ID: "a4", NodeID: "node-2", TaskGroup: "g", Job: job("g", "billing", "billing-task"),
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})
	m.b.addAlloc(&structs.Allocation{ID: "a5", NodeID: "node-1", TaskGroup: "other", Job: job("g", "ghost", "ghost-task"),
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})

	for _, svc := range []string{"web", "api"} {
		csr, pub := makeCSR(t, "")
		signed, err := m.c.SignCSR(ctx, svc, csr)
		if err != nil {
			t.Fatalf("SignCSR(%s): %v", svc, err)
		}
		block, _ := pem.Decode([]byte(signed.CertChainPEM))
		if block == nil || signed.RootID != m.f.ca.Roots().ActiveRootID {
			t.Fatalf("SignCSR(%s) = %+v", svc, signed)
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !reflect.DeepEqual(leaf.PublicKey, pub) || leaf.URIs[0].String() != m.f.ca.SpiffeID(svc) {
			t.Fatalf("SignCSR(%s): leaf %v, %v; want the CSR's key and the service's identity", svc, leaf, err)
		}
		if err := leaf.CheckSignatureFrom(m.f.caCert(t)); err != nil {
			t.Fatalf("SignCSR(%s): leaf not signed by the CA: %v", svc, err)
		}
	}
	for _, svc := range []string{"db", "db-task", "cache", "cache-task", "billing", "ghost", "nothing"} {
		csr, _ := makeCSR(t, "")
		_, err := m.c.SignCSR(ctx, svc, csr)
		wantErr(t, "sign "+svc, err, ErrForbidden)
		wantErr(t, "sign "+svc+" (as the CA sees it)", err, ca.ErrSignRefused)
		if !strings.Contains(err.Error(), `"`+svc+`"`) {
			t.Fatalf("sign %s: error %q does not name the service", svc, err)
		}
	}
	// A CSR asking for another service's identity is refused (403) and
	// logged, whatever its trust domain.
	for _, uri := range []string{m.f.ca.SpiffeID("billing"), "spiffe://other.meshlet/ns/default/dc/dc1/svc/billing"} {
		csr, _ := makeCSR(t, uri)
		_, err := m.c.SignCSR(ctx, "web", csr)
		wantErr(t, "CSR naming another service", err, ErrForbidden)
	}
	csr, _ := makeCSR(t, m.f.ca.SpiffeID("web"))
	if _, err := m.c.SignCSR(ctx, "web", csr); err != nil {
		t.Fatalf("CSR naming its own service: %v", err)
	}
	// The checks read the node's allocations without posing as the node's
	// own fetch (whose answers the servers remember to tell a removal).
	m.b.mu.Lock()
	fetches := m.b.fetches
	m.b.mu.Unlock()
	if fetches != 0 {
		t.Fatalf("signing made %d NodeAllocs fetches, want 0 (AllocsOnNode)", fetches)
	}
	// What the CA refuses in the CSR itself is a 400, which no other
	// server would answer otherwise: the client does not try them.
	for _, tc := range []struct{ name, csr string }{
		{"garbage CSR", "not a CSR"},
		{"RSA key", rsaCSR(t)},
		{"two URI SANs", multiURICSR(t, m.f.ca.SpiffeID("web"), m.f.ca.SpiffeID("web"))},
		{"foreign trust domain", func() string { c, _ := makeCSR(t, "spiffe://other.meshlet/ns/default/dc/dc1/svc/web"); return c }()},
	} {
		_, err := m.c.SignCSR(ctx, "web", tc.csr)
		wantErr(t, tc.name, err, ErrBadRequest)
		wantNot(t, tc.name, err, ErrNoServers, ErrForbidden)
	}
	_, err := m.c.SignCSR(ctx, "web*", csr)
	wantErr(t, "invalid service name", err, ErrBadRequest)
	m.f.mu.Lock()
	signed := append([]string(nil), m.f.signed...)
	m.f.mu.Unlock()
	if want := []string{"web", "api", "web"}; !reflect.DeepEqual(signed, want) {
		t.Fatalf("backend signed %v, want %v", signed, want)
	}
}

// Intention writes go through the servers; their errors keep the
// intention package's sentinels and the servers' text on the client.
func TestConnectIntentions(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	w := m.c.ConnectIntentions()
	in := intention.Intention{SourceName: "web", DestinationName: "db", Action: intention.ActionAllow}
	got, idx, err := w.Upsert(ctx, in, false)
	if err != nil || got.ID == "" || got.SourceName != "web" || idx != 2 { // an empty store is at 1
		t.Fatalf("Upsert = %+v, %d, %v", got, idx, err)
	}
	_, _, err = w.Upsert(ctx, in, false)
	wantErr(t, "upsert of an existing pair", err, intention.ErrExists)
	wantNot(t, "upsert of an existing pair", err, intention.ErrNotFound, intention.ErrInvalid, ErrNoServers)
	if err.Error() != "intention already exists: web => db" {
		t.Fatalf("error text %q, want the server's", err)
	}
	in.Action = intention.ActionDeny
	if upd, idx, err := w.Upsert(ctx, in, true); err != nil || upd.ID != got.ID || upd.Action != intention.ActionDeny || idx != 3 {
		t.Fatalf("Upsert(replace) = %+v, %d, %v", upd, idx, err)
	}
	moved := intention.Intention{SourceName: "web", DestinationName: "cache", Action: intention.ActionDeny}
	_, _, err = w.UpdateByID(ctx, got.ID, moved, nil)
	wantErr(t, "update by ID onto another destination", err, intention.ErrInvalid)
	_, _, err = w.UpdateByID(ctx, "no-such-id", in, nil)
	wantErr(t, "update of an absent ID", err, intention.ErrNotFound)
	_, _, err = w.Upsert(ctx, intention.Intention{SourceName: "web", DestinationName: "db", Action: "maybe"}, true)
	wantErr(t, "invalid action", err, intention.ErrInvalid)
	wantNot(t, "invalid action", err, intention.ErrExists, intention.ErrNotFound)
	_, _, err = w.Delete(ctx, "web", "nope")
	wantErr(t, "delete of an absent pair", err, intention.ErrNotFound)
	_, _, err = w.DeleteByID(ctx, "no-such-id", nil)
	wantErr(t, "delete of an absent ID", err, intention.ErrNotFound)
	if del, idx, err := w.DeleteByID(ctx, got.ID, nil); err != nil || del.ID != got.ID || idx != 4 {
		t.Fatalf("DeleteByID = %+v, %d, %v", del, idx, err)
	}
	_, _, err = w.Delete(ctx, "web", "db")
	wantErr(t, "delete after delete", err, intention.ErrNotFound)
	if got := rawStatus(t, m, http.MethodPost, pathConnectIntentions, `{"Op":"drop"}`, "s1"); got != http.StatusBadRequest {
		t.Fatalf("unknown op: status %d, want 400", got)
	}
	if got := rawStatus(t, m, http.MethodPost, pathConnectIntentions, `{"Op":"delete","Source":"web"}`, "s1"); got != http.StatusBadRequest {
		t.Fatalf("delete without destination: status %d, want 400", got)
	}
}

// A node with a wrong secret is refused (403) by every mesh call, and the
// backend sees none of them.
func TestConnectWrongSecretForbidden(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1"})
	bad := newTestClient(t, []string{m.addr}, m.p.clientTLS("client", "bad"), "node-1", "wrong")
	err := bad.PutAllocServices(ctx, "a1", []catalog.ServiceInstance{inst("node-1", "a1", "web")})
	wantErr(t, "put with a wrong secret", err, ErrForbidden)
	wantErr(t, "delete with a wrong secret", bad.DeleteAllocServices(ctx, "a1"), ErrForbidden)
	csr, _ := makeCSR(t, "")
	_, err = bad.SignCSR(ctx, "web", csr)
	wantErr(t, "sign with a wrong secret", err, ErrForbidden)
	_, _, err = bad.ConnectIntentions().Upsert(ctx, intention.Intention{SourceName: "a", DestinationName: "b", Action: "allow"}, false)
	wantErr(t, "intention with a wrong secret", err, ErrForbidden)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, pathConnectWatch, ""},
		{http.MethodPut, pathConnectAlloc + "a1", `{"Instances":[]}`},
		{http.MethodDelete, pathConnectAlloc + "a1", ""},
		{http.MethodPost, pathConnectSign, `{"Service":"web","CSR":""}`},
		{http.MethodPost, pathConnectIntentions, `{"Op":"delete-by-id","ID":"x"}`},
	} {
		if got := rawStatus(t, m, tc.method, tc.path, tc.body, "wrong"); got != http.StatusForbidden {
			t.Errorf("%s %s with a wrong secret: status %d, want 403", tc.method, tc.path, got)
		}
	}
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.f.rev != 1 || len(m.f.signed) != 0 || m.f.intents.Index != 0 || m.f.follows != 0 {
		t.Fatalf("backend saw refused calls: rev %d, signed %v, intentions index %d, follows %d", m.f.rev, m.f.signed, m.f.intents.Index, m.f.follows)
	}
}

// A server without ServerConfig.Connect answers the mesh calls 404.
func TestConnectNotServed(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b, nil, nil)
	c := newTestClient(t, []string{addr}, nil, "node-1", "s1")
	ctx := ctxT(t, 10*time.Second)
	if err := c.RegisterNode(ctx, &structs.Node{ID: "node-1"}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete without connect", c.DeleteAllocServices(ctx, "a1"), ErrConnectNotServed)
	_, _, err := c.ConnectIntentions().Delete(ctx, "a", "b")
	wantErr(t, "intention without connect", err, ErrConnectNotServed)
	wantNot(t, "intention without connect", err, intention.ErrNotFound)
}

// The CA roots are served to a client agent that has no node identity yet
// (its control plane needs the trust domain before the node registers),
// and refused to a CLI certificate.
func TestConnectRootsWithoutNodeIdentity(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	fresh := newTestClient(t, []string{m.addr}, m.p.clientTLS(tlsutil.RoleClient, "c2"), "", "")
	roots, err := fresh.ConnectRoots(ctx)
	if err != nil {
		t.Fatalf("ConnectRoots without a node identity: %v", err)
	}
	if want, _ := m.f.Roots(ctx); roots.TrustDomain != want.TrustDomain || roots.ActiveRootID != want.ActiveRootID {
		t.Fatalf("roots = %+v, want %+v", roots, want)
	}
	cli := newTestClient(t, []string{m.addr}, m.p.clientTLS(tlsutil.RoleCLI, "op"), "", "")
	if _, err := cli.ConnectRoots(ctx); err == nil {
		t.Fatal("a CLI certificate read the roots")
	}
}

// A node registers only the services its allocation declares (and their
// sidecar proxies): not another job's service name, which would draw that
// service's traffic to the node.
func TestConnectPutAllocDeclaredServicesOnly(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	job := &structs.Job{ID: "web", TaskGroups: []*structs.TaskGroup{{Name: "g",
		Services: []*structs.Service{{Name: "web"}},
		Tasks:    []*structs.Task{{Name: "t", Services: []*structs.Service{{Name: "web-admin"}}}}}}}
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", Job: job, TaskGroup: "g"})
	ok := []catalog.ServiceInstance{inst("node-1", "a1", "web"), proxyInst("node-1", "a1", "web"), inst("node-1", "a1", "web-admin")}
	if err := m.c.PutAllocServices(ctx, "a1", ok); err != nil {
		t.Fatalf("declared services refused: %v", err)
	}
	// A proxy named after the allocation's service but fronting db would
	// be one of db's proxies to EDS (it picks them by destination).
	hijack := proxyInst("node-1", "a1", "db")
	hijack.Name = connect.ProxyServiceName("web")
	noProxy := proxyInst("node-1", "a1", "web")
	noProxy.Proxy = nil
	for _, tc := range []struct {
		name string
		bad  catalog.ServiceInstance
	}{
		{"db", inst("node-1", "a1", "db")},
		{"db-sidecar-proxy", proxyInst("node-1", "a1", "db")},
		{"web-admin-sidecar-proxy-x", inst("node-1", "a1", "web-admin-sidecar-proxy-x")},
		{"web-sidecar-proxy", hijack},
		{"web-sidecar-proxy", noProxy},
		{"web-sidecar-proxy", inst("node-1", "a1", "web-sidecar-proxy")}, // a plain instance with a proxy's name
	} {
		err := m.c.PutAllocServices(ctx, "a1", append(append([]catalog.ServiceInstance(nil), ok...), tc.bad))
		wantErr(t, "register "+tc.name, err, ErrForbidden)
		if err != nil && !strings.Contains(err.Error(), `"`+tc.name+`"`) {
			t.Errorf("register %s: error %q does not name the service", tc.name, err)
		}
	}
	if got, _ := m.f.reg("node-1", "a1"); len(got) != 3 {
		t.Fatalf("stored %d instances after the refusals, want the 3 declared", len(got))
	}
}

// An allocation that is terminal or told to stop registers nothing (as
// no leaf is signed for it); clearing its registrations stays allowed.
func TestConnectPutAllocStoppedRefused(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	job := &structs.Job{ID: "web", TaskGroups: []*structs.TaskGroup{{Name: "g", Services: []*structs.Service{{Name: "web"}}}}}
	for _, a := range []*structs.Allocation{
		{ID: "stopping", DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusRunning},
		{ID: "complete", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusComplete},
		{ID: "failed", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusFailed},
		{ID: "running", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning},
	} {
		a.NodeID, a.Job, a.TaskGroup = "node-1", job, "g"
		m.b.addAlloc(a)
		err := m.c.PutAllocServices(ctx, a.ID, []catalog.ServiceInstance{inst("node-1", a.ID, "web")})
		if a.ID == "running" {
			if err != nil {
				t.Fatalf("register running: %v", err)
			}
			continue
		}
		wantErr(t, "register "+a.ID, err, ErrForbidden)
		if _, stored := m.f.reg("node-1", a.ID); stored {
			t.Errorf("%s: registration stored", a.ID)
		}
		if err := m.c.PutAllocServices(ctx, a.ID, nil); err != nil {
			t.Errorf("%s: clearing the registrations: %v", a.ID, err)
		}
	}
}
