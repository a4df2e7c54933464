package xds

import (
	"reflect"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func TestIngressWildcard(t *testing.T) {
	entries := []configentry.Entry{
		&consul.IngressGatewayConfigEntry{Kind: consul.IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
			{Port: 8081, Protocol: "http", Services: []consul.IngressService{{Name: "*"}, {Name: "web", Hosts: []string{"web.example.com"}}}},
		}},
		&consul.ProxyConfigEntry{Kind: consul.ProxyDefaults, Name: consul.ProxyConfigGlobal, Config: map[string]any{"protocol": "http"}},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "tcp"},
	}
	set := configentry.NewSet()
	for _, e := range entries {
		if err := set.Check(e); err != nil {
			t.Fatal(err)
		}
		set = set.With(e)
	}
	b := builder{dc: "dc1", trustDomain: testTD, set: set, meshServices: func() []string { return []string{"api", "db", "web"} }}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.routes) != 1 {
		t.Fatalf("routes = %v", res.routes)
	}
	var got [][]string
	for _, vh := range res.routes[0].GetVirtualHosts() {
		got = append(got, append([]string{vh.GetName()}, vh.GetDomains()...))
	}
	want := [][]string{{"web", "web.example.com", "web.example.com:8081"}, {"api", "api.ingress.*", "api.ingress.*:8081"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("virtual hosts = %v, want %v (db is tcp; web keeps its hosts)", got, want)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := envoyvalidate.All(res.routes[0]); err != nil {
		t.Fatal(err)
	}
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
}

func TestMeshServices(t *testing.T) {
	c := catalog.New()
	for _, inst := range []catalog.ServiceInstance{
		{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 8080, Healthy: true, Connect: true},
		{ID: "web-1-proxy", Name: "web-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: "10.0.0.1", Port: 21000, Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "web"}},
		{ID: "x-proxy", Name: "x-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: "10.0.0.3", Port: 21000, Healthy: true, Datacenter: "dc2", Proxy: &catalog.Proxy{DestinationServiceName: "x"}},
		{ID: "gw", Name: "ingress", Kind: catalog.KindIngressGateway, Address: "10.0.0.2", Port: 8080, Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "ingress"}},
		{ID: "plain", Name: "plain", Address: "10.0.0.4", Port: 80, Healthy: true},
	} {
		c.Register(inst)
	}
	if got := meshServices(c, "dc1"); !reflect.DeepEqual(got, []string{"web"}) {
		t.Fatalf("meshServices = %v, want [web] (no gateway, no plain service, no other datacenter)", got)
	}
}
