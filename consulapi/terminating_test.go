package consulapi

import (
	"reflect"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
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
