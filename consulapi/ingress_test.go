package consulapi

import (
	"reflect"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

// An ingress-gateway entry round-trips through the official client, and
// the catalog lists the gateway service with its Kind.
func TestIngressGatewayOfficialClient(t *testing.T) {
	f, _ := configFixture(t)
	ce := f.client.ConfigEntries()
	in := &consul.IngressGatewayConfigEntry{Kind: consul.IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
		{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}},
		{Port: 8081, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}, {Name: "dash"}}},
	}}
	if ok, _, err := ce.Set(in, nil); err != nil || !ok {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	got, _, err := ce.Get(consul.IngressGateway, "ingress", nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, ok := got.(*consul.IngressGatewayConfigEntry)
	if !ok || gw.ModifyIndex == 0 {
		t.Fatalf("Get = %#v", got)
	}
	gw.CreateIndex, gw.ModifyIndex = 0, 0
	if !reflect.DeepEqual(gw, in) {
		t.Errorf("Get:\n got %+v\nwant %+v", gw, in)
	}
	bad := &consul.IngressGatewayConfigEntry{Kind: consul.IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
		{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "a"}, {Name: "b"}}}}}
	if _, _, err := ce.Set(bad, nil); err == nil || !strings.Contains(err.Error(), "multiple services per listener") {
		t.Errorf("Set of a tcp listener with two services = %v", err)
	}

	f.cat.Register(catalog.ServiceInstance{ID: "gw-1", Name: "ingress", Kind: catalog.KindIngressGateway, Address: "10.0.0.1", Port: 8080,
		Healthy: true, Proxy: &catalog.Proxy{}})
	var raw []struct{ ServiceKind, ServiceName string }
	if _, err := f.client.Raw().Query("/v1/catalog/service/ingress", &raw, nil); err != nil || len(raw) != 1 || raw[0].ServiceKind != "ingress-gateway" {
		t.Fatalf("catalog/service/ingress = %+v, %v", raw, err)
	}
	entries, _, err := f.client.Health().Service("ingress", "", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindIngressGateway || entries[0].Service.Port != 8080 {
		t.Fatalf("health service = %+v, %v", entries, err)
	}
}
