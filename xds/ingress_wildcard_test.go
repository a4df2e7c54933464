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

func TestIngressHTTP2AndGRPCListeners(t *testing.T) {
	entries := []configentry.Entry{
		&consul.IngressGatewayConfigEntry{Kind: consul.IngressGateway, Name: "ingress", TLS: consul.GatewayTLSConfig{Enabled: true}, Listeners: []consul.IngressListener{
			{Port: 9090, Protocol: "grpc", Services: []consul.IngressService{{Name: "g", Hosts: []string{"g.example.com"}}}},
			{Port: 9091, Protocol: "http2", Services: []consul.IngressService{{Name: "h"}}},
		}},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "g", Protocol: "grpc"},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "h", Protocol: "http2"},
	}
	set := configentry.NewSet()
	for _, e := range entries {
		if err := set.Check(e); err != nil {
			t.Fatal(err)
		}
		set = set.With(e)
	}
	b := builder{dc: "dc1", trustDomain: testTD, set: set}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerNames(res); !reflect.DeepEqual(got, []string{"grpc:0.0.0.0:9090", "http2:0.0.0.0:9091"}) {
		t.Fatalf("listeners = %v", got)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatal(err)
		}
		if alpn := downstreamTLSOf(t, l).GetCommonTlsContext().GetAlpnProtocols(); !reflect.DeepEqual(alpn, []string{"h2", "http/1.1"}) {
			t.Errorf("listener %s ALPN = %v", l.GetName(), alpn)
		}
	}
	if len(res.clusters) != 2 {
		t.Fatalf("clusters = %d", len(res.clusters))
	}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
			t.Errorf("cluster %s does not speak HTTP/2 to the sidecars: %v", c.GetName(), c.GetTypedExtensionProtocolOptions())
		}
	}
}
