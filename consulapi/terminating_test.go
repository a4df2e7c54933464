package consulapi

import (
	"reflect"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
)

// A terminating-gateway entry round-trips through the official client,
// and its rules are enforced on write.
func TestTerminatingGatewayOfficialClient(t *testing.T) {
	f, _ := configFixture(t)
	ce := f.client.ConfigEntries()
	in := &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{
		{Name: "db"},
		{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "/etc/ssl/cert.pem", KeyFile: "/etc/ssl/key.pem", SNI: "api.example.com"},
	}}
	if ok, _, err := ce.Set(in, nil); err != nil || !ok {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	got, _, err := ce.Get(consul.TerminatingGateway, "tgw", nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, ok := got.(*consul.TerminatingGatewayConfigEntry)
	if !ok || gw.ModifyIndex == 0 {
		t.Fatalf("Get = %#v", got)
	}
	gw.CreateIndex, gw.ModifyIndex = 0, 0
	if !reflect.DeepEqual(gw, in) {
		t.Errorf("Get:\n got %+v\nwant %+v", gw, in)
	}
	list, _, err := ce.List(consul.TerminatingGateway, nil)
	if err != nil || len(list) != 1 || list[0].GetName() != "tgw" {
		t.Errorf("List = %v, %v", list, err)
	}
	bad := &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{
		{Name: "db", SNI: "db.example"}}}
	if _, _, err := ce.Set(bad, nil); err == nil || !strings.Contains(err.Error(), "SNI was specified, but CAFile was not") {
		t.Errorf("Set of SNI without a CA = %v", err)
	}
	if _, err := ce.Delete(consul.TerminatingGateway, "tgw", nil); err != nil {
		t.Errorf("Delete = %v", err)
	}
}

// A service outside the mesh registers through the official client's
// Catalog().Register (no sidecar) and deregisters through Deregister.
func TestCatalogRegisterOfficialClient(t *testing.T) {
	f, _ := configFixture(t)
	reg := &consul.CatalogRegistration{Node: "legacy", Address: "192.0.2.10", Service: &consul.AgentService{
		ID: "db-1", Service: "db", Port: 5432, Tags: []string{"v1"}, Meta: map[string]string{"k": "v"}},
		Checks: consul.HealthChecks{{CheckID: "db-alive", Name: "alive", Status: consul.HealthPassing, ServiceID: "db-1"}}}
	if _, err := f.client.Catalog().Register(reg, nil); err != nil {
		t.Fatal(err)
	}
	got, ok := f.cat.Get("db-1")
	if !ok || got.Name != "db" || got.Address != "192.0.2.10" || got.Port != 5432 || !got.Healthy || got.Kind != "" ||
		got.NodeID != "_external-legacy" || got.Meta["k"] != "v" || len(got.Checks) != 1 {
		t.Fatalf("registered instance = %+v (%v)", got, ok)
	}
	svcs, _, err := f.client.Catalog().Service("db", "", nil)
	if err != nil || len(svcs) != 1 || svcs[0].ServicePort != 5432 || svcs[0].ServiceAddress != "192.0.2.10" {
		t.Fatalf("catalog/service/db = %+v, %v", svcs, err)
	}
	reg.Checks[0].Status = consul.HealthCritical
	if _, err := f.client.Catalog().Register(reg, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.cat.Get("db-1"); got.Healthy {
		t.Error("a critical check left the instance healthy")
	}
	bad := &consul.CatalogRegistration{Node: "legacy", Service: &consul.AgentService{Service: "x", Port: 1, Address: "not-an-ip"}}
	if _, err := f.client.Catalog().Register(bad, nil); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("Register with a bad address = %v", err)
	}
	if _, err := f.client.Catalog().Deregister(&consul.CatalogDeregistration{Node: "legacy", ServiceID: "db-1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.cat.Get("db-1"); ok {
		t.Error("deregistered instance is still in the catalog")
	}
}

// With ACLs, registering needs node write and service write, as in Consul.
func TestCatalogRegisterACL(t *testing.T) {
	f := newACLFixture(t)
	reg := &consul.CatalogRegistration{Node: "legacy", Address: "192.0.2.10", Service: &consul.AgentService{ID: "web-ext", Service: "web", Port: 80}}
	_, err := f.as(t, f.team).Catalog().Register(reg, nil) // service write on web, no node write
	wantStatus(t, "register without node write", err, 403, "Permission denied")
	_, err = f.as(t, "").Catalog().Register(reg, nil)
	wantStatus(t, "anonymous register", err, 403, "Permission denied")
	if _, err := f.as(t, f.mgmt).Catalog().Register(reg, nil); err != nil {
		t.Fatalf("management register: %v", err)
	}
	_, err = f.as(t, f.team).Catalog().Deregister(&consul.CatalogDeregistration{Node: "legacy", ServiceID: "web-ext"}, nil)
	wantStatus(t, "deregister without node write", err, 403, "Permission denied")
	if _, err := f.as(t, f.mgmt).Catalog().Deregister(&consul.CatalogDeregistration{Node: "legacy", ServiceID: "web-ext"}, nil); err != nil {
		t.Fatalf("management deregister: %v", err)
	}
}

// webNodeTeam is the web team with node write.
type webNodeTeam struct{ webTeam }

func (webNodeTeam) AllowNodeWrite() bool { return true }

// Replacing an instance of another service needs service write on it too
// (Consul's vetRegisterWithACL): node write and write on "web" cannot
// turn db's instance into web's.
func TestCatalogRegisterACLReplacingAnotherService(t *testing.T) {
	f := newACLFixtureWith(t, func(a *acl.ACL) authorizer { return webNodeTeam{webTeam{a}} })
	db := &consul.CatalogRegistration{Node: "legacy", Address: "192.0.2.10", Service: &consul.AgentService{ID: "db-ext", Service: "db", Port: 5432}}
	if _, err := f.as(t, f.mgmt).Catalog().Register(db, nil); err != nil {
		t.Fatal(err)
	}
	hijack := &consul.CatalogRegistration{Node: "legacy", Address: "192.0.2.66", Service: &consul.AgentService{ID: "db-ext", Service: "web", Port: 80}}
	_, err := f.as(t, f.team).Catalog().Register(hijack, nil)
	wantStatus(t, "replacing db's instance with write on web only", err, 403, "Permission denied")
	if got, _ := f.cat.Get("db-ext"); got.Name != "db" || got.Address != "192.0.2.10" {
		t.Fatalf("db's instance after the refusal = %+v", got)
	}
	own := &consul.CatalogRegistration{Node: "legacy", Address: "192.0.2.11", Service: &consul.AgentService{ID: "web-ext", Service: "web", Port: 80}}
	if _, err := f.as(t, f.team).Catalog().Register(own, nil); err != nil {
		t.Fatalf("registering web with node write and write on web: %v", err)
	}
}

// Service IDs key this catalog across nodes: a registration may not take
// another external node's ID, a mesh instance's, or one of the IDs
// meshlet gives jobs' instances; the instance that holds it stays.
func TestCatalogRegisterKeepsOthersIDs(t *testing.T) {
	f, _ := configFixture(t)
	f.cat.Register(catalog.ServiceInstance{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 8080, NodeID: "n1", NodeName: "c1", Healthy: true, Connect: true})
	first := &consul.CatalogRegistration{Node: "ext-a", Address: "192.0.2.1", Service: &consul.AgentService{Service: "legacy", Port: 80}}
	if _, err := f.client.Catalog().Register(first, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		reg  *consul.CatalogRegistration
		want string
	}{
		{"another external node's ID", &consul.CatalogRegistration{Node: "ext-b", Address: "192.0.2.2",
			Service: &consul.AgentService{Service: "legacy", Port: 80}}, `409 (service ID taken: service ID "legacy" is registered on node ext-a`},
		{"a mesh instance's ID", &consul.CatalogRegistration{Node: "evil", Address: "192.0.2.66",
			Service: &consul.AgentService{ID: "web-1", Service: "other", Port: 80}}, `409 (service ID taken: service ID "web-1" is registered on node c1 (a mesh instance)`},
		{"a job instance's ID", &consul.CatalogRegistration{Node: "evil", Address: "192.0.2.66",
			Service: &consul.AgentService{ID: "_nomad-task-x-group-web-web-8080", Service: "web", Port: 80}}, `409 (service ID taken: service ID "_nomad-task-x-group-web-web-8080": IDs starting with "_nomad-"`},
	} {
		if _, err := f.client.Catalog().Register(tc.reg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Register = %v, want %s", tc.name, err, tc.want)
		}
	}
	if got, ok := f.cat.Get("legacy"); !ok || got.NodeID != "_external-ext-a" || got.Address != "192.0.2.1" {
		t.Errorf("ext-a's legacy after the refusals = %+v (%v)", got, ok)
	}
	if got, ok := f.cat.Get("web-1"); !ok || got.Name != "web" || got.NodeID != "n1" {
		t.Errorf("the mesh instance web-1 after the refusals = %+v (%v)", got, ok)
	}
}
