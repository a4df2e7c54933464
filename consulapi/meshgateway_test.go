package consulapi

import (
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

// A mesh gateway shows its Kind and its lan/wan tagged addresses in both
// of Consul's shapes, read with the official client; its proxy block names
// no destination.
func TestMeshGatewayCatalogShapes(t *testing.T) {
	f, _ := configFixture(t)
	f.cat.Register(catalog.ServiceInstance{ID: "mgw-1", Name: "mesh-gateway", Kind: catalog.KindMeshGateway, Address: "10.0.0.5", Port: 8443,
		Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "mesh-gateway"},
		TaggedAddresses: map[string]catalog.TaggedAddress{catalog.TaggedLAN: {Address: "10.0.0.5", Port: 8443}, catalog.TaggedWAN: {Address: "192.0.2.5", Port: 443}}})
	want := map[string]consul.ServiceAddress{"lan": {Address: "10.0.0.5", Port: 8443}, "wan": {Address: "192.0.2.5", Port: 443}}

	svcs, _, err := f.client.Catalog().Service("mesh-gateway", "", nil)
	if err != nil || len(svcs) != 1 {
		t.Fatalf("catalog service = %+v, %v", svcs, err)
	}
	if got := svcs[0].ServiceTaggedAddresses; len(got) != 2 || got["lan"] != want["lan"] || got["wan"] != want["wan"] {
		t.Errorf("ServiceTaggedAddresses = %+v", got)
	}
	if p := svcs[0].ServiceProxy; p == nil || p.DestinationServiceName != "" {
		t.Errorf("ServiceProxy = %+v (a gateway names no destination)", p)
	}
	var raw []struct{ ServiceKind string }
	if _, err := f.client.Raw().Query("/v1/catalog/service/mesh-gateway", &raw, nil); err != nil || len(raw) != 1 || raw[0].ServiceKind != "mesh-gateway" {
		t.Errorf("ServiceKind = %+v, %v", raw, err)
	}
	entries, _, err := f.client.Health().Service("mesh-gateway", "", true, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindMeshGateway {
		t.Fatalf("health service = %+v, %v", entries, err)
	}
	if got := entries[0].Service.TaggedAddresses; len(got) != 2 || got["lan"] != want["lan"] || got["wan"] != want["wan"] {
		t.Errorf("Service.TaggedAddresses = %+v", got)
	}
}
