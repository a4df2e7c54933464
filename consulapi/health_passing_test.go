package consulapi

import (
	"encoding/json"
	"net/http"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

// ?passing keeps only the instances whose every check is passing, as
// Consul's filter does: a warning is not passing there (it only still
// receives traffic, which is what Healthy says).
func TestHealthPassingExcludesWarning(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	f.cat.Register(catalog.ServiceInstance{
		ID: "web-3", Name: "web", Address: "10.0.0.4", Port: 8080, NodeID: "n1", Healthy: true, Connect: true,
		Checks: []catalog.Check{{ID: "http", Name: "http", Type: "http", Status: consul.HealthWarning}},
	})
	f.registerProxy("web-1-sidecar-proxy", "web", 21000, true)
	f.cat.Register(catalog.ServiceInstance{
		ID: "web-3-sidecar-proxy", Name: "web-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: "10.0.0.4", Port: 21002,
		NodeID: "n1", Healthy: true, Checks: []catalog.Check{{ID: "tcp", Name: "tcp", Type: "tcp", Status: consul.HealthWarning}},
		Proxy: &catalog.Proxy{DestinationServiceName: "web", DestinationServiceID: "web-3"},
	})

	ids := func(entries []*consul.ServiceEntry) map[string]string {
		out := map[string]string{}
		for _, e := range entries {
			out[e.Service.ID] = e.Checks.AggregatedStatus()
		}
		return out
	}
	all, _, err := f.client.Health().Service("web", "", false, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("Health().Service(web) = %v, %v; want 3 entries", ids(all), err)
	}
	passing, _, err := f.client.Health().Service("web", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(passing); len(got) != 2 || got["web-3"] != "" {
		t.Errorf("Health().Service(web, passing) = %v; want web-1 and web-2 only", got)
	}
	proxies, _, err := f.client.Health().Connect("web", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(proxies); len(got) != 1 || got["web-1-sidecar-proxy"] != consul.HealthPassing {
		t.Errorf("Health().Connect(web, passing) = %v; want web-1-sidecar-proxy only", got)
	}
}

// ?passing takes a boolean as Consul reads it: present and empty or true
// filters, false does not, anything else is a 400.
func TestHealthPassingValue(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	f.cat.Register(catalog.ServiceInstance{ID: "web-3", Name: "web", Address: "10.0.0.4", Port: 8080, NodeID: "n1", Healthy: false})
	cases := []struct {
		query string
		code  int
		n     int
	}{
		{"", http.StatusOK, 3}, {"?passing", http.StatusOK, 2}, {"?passing=1", http.StatusOK, 2}, {"?passing=true", http.StatusOK, 2},
		{"?passing=false", http.StatusOK, 3}, {"?passing=0", http.StatusOK, 3}, {"?passing=maybe", http.StatusBadRequest, 0},
	}
	for _, tc := range cases {
		resp, err := http.Get(f.url + "/v1/health/service/web" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var entries []consul.ServiceEntry
		if tc.code == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&entries)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || err != nil || len(entries) != tc.n {
			t.Errorf("GET /v1/health/service/web%s = %d with %d entries (%v); want %d with %d", tc.query, resp.StatusCode, len(entries), err, tc.code, tc.n)
		}
	}
}
