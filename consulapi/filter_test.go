package consulapi

import (
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

// The official client's QueryOptions.Filter selects health and catalog
// entries, as Consul's go-bexpr filter does; a bad expression is a 400.
func TestOfficialClientFilter(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	health, _, err := f.client.Health().Service("web", "", false, &consul.QueryOptions{Filter: `Service.ID == "web-1"`})
	if err != nil || len(health) != 1 || health[0].Service.ID != "web-1" {
		t.Fatalf("health/service/web filtered to web-1 = %v, %v", health, err)
	}
	nodes, _, err := f.client.Catalog().Service("web", "", &consul.QueryOptions{Filter: `"v2" in ServiceTags`})
	if err != nil || len(nodes) != 1 || nodes[0].ServiceID != "web-2" {
		t.Fatalf("catalog/service/web with tag v2 = %v, %v", nodes, err)
	}
	// catalog/services: the services with a matching instance, with those
	// instances' tags (Consul filters its ServiceNodes before grouping).
	services, _, err := f.client.Catalog().Services(&consul.QueryOptions{Filter: `ServiceAddress == "10.0.0.2" or ServiceName == "db"`})
	if err != nil || len(services) != 2 || strings.Join(services["web"], ",") != "v2" || services["db"] == nil || len(services["db"]) != 0 {
		t.Fatalf("catalog/services filtered to web-2 and db = %v, %v; want web: [v2], db: []", services, err)
	}
	if _, _, err := f.client.Catalog().Services(&consul.QueryOptions{Filter: `NoSuchField == "x"`}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("catalog/services with a selector no entry has = %v, want 400", err)
	}
	if _, _, err := f.client.Health().Service("web", "", false, &consul.QueryOptions{Filter: `this is (not valid`}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a bad filter = %v, want 400", err)
	}
}
