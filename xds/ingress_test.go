package xds

import (
	"reflect"
	"testing"

	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func testGateway(cfg map[string]any) catalog.ServiceInstance {
	return catalog.ServiceInstance{ID: "gw-1", Name: "ingress", Kind: catalog.KindIngressGateway, Address: "10.0.0.9", Port: 8080,
		Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "ingress", Config: cfg}}
}

func ingressSet(t *testing.T) *configentry.Set {
	t.Helper()
	entries := []configentry.Entry{
		&consul.IngressGatewayConfigEntry{Kind: consul.IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
			{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}},
			{Port: 8081, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}, {Name: "dash"}}},
		}},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "dash", Protocol: "http"},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "dash-v2", Protocol: "http"},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "dash", Splits: []consul.ServiceSplit{
			{Weight: 90}, {Weight: 10, Service: "dash-v2"}}},
	}
	set := configentry.NewSet()
	for _, e := range entries {
		if err := set.Check(e); err != nil {
			t.Fatal(err)
		}
		set = set.With(e)
	}
	return set
}

func TestIngressGatewayResources(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD, set: ingressSet(t)}
	res, err := b.proxy(testGateway(map[string]any{"connect_timeout_ms": 3000}))
	if err != nil {
		t.Fatal(err)
	}
	if res.service != "ingress" {
		t.Errorf("identity = %q", res.service)
	}
	var names []string
	for _, l := range res.listeners {
		names = append(names, l.GetName())
		if err := envoyvalidate.All(l); err != nil {
			t.Errorf("listener %s: %v", l.GetName(), err)
		}
		if a := l.GetAddress().GetSocketAddress(); a.GetAddress() != "0.0.0.0" {
			t.Errorf("listener %s binds %s", l.GetName(), a.GetAddress())
		}
	}
	if want := []string{"tcp:0.0.0.0:8080", "http:0.0.0.0:8081"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("listeners = %v, want %v", names, want)
	}
	tp := unpack(t, res.listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &tcpproxy.TcpProxy{})
	apiCluster := ClusterName("api", "dc1", testTD)
	if tp.GetCluster() != apiCluster {
		t.Errorf("tcp listener proxies to %q, want %q", tp.GetCluster(), apiCluster)
	}
	clusters := map[string]bool{}
	for _, c := range res.clusters {
		clusters[c.GetName()] = true
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		if c.GetConnectTimeout().AsDuration().Milliseconds() != 3000 {
			t.Errorf("cluster %s: connect timeout %s", c.GetName(), c.GetConnectTimeout().AsDuration())
		}
		tls := unpack(t, c.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
		if tls.GetSni() != c.GetName() || tls.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName() != LeafSecretName("ingress") {
			t.Errorf("cluster %s: SNI %q, leaf %v", c.GetName(), tls.GetSni(), tls.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs())
		}
	}
	for _, svc := range []string{"api", "web", "dash", "dash-v2"} {
		if !clusters[ClusterName(svc, "dc1", testTD)] {
			t.Errorf("no cluster for %s in %v", svc, clusters)
		}
	}
	if len(res.routes) != 1 || res.routes[0].GetName() != "8081" {
		t.Fatalf("routes = %v", res.routes)
	}
	rc := res.routes[0]
	if err := envoyvalidate.All(rc); err != nil {
		t.Error(err)
	}
	want := map[string][]string{
		"web":  {"web.example.com", "web.example.com:8081"},
		"dash": {"dash.ingress.*", "dash.ingress.*:8081"},
	}
	for _, vh := range rc.GetVirtualHosts() {
		if !reflect.DeepEqual(vh.GetDomains(), want[vh.GetName()]) {
			t.Errorf("virtual host %s domains %v, want %v", vh.GetName(), vh.GetDomains(), want[vh.GetName()])
		}
	}
	dash := rc.GetVirtualHosts()[1].GetRoutes()[0].GetRoute()
	if wc := dash.GetWeightedClusters().GetClusters(); len(wc) != 2 {
		t.Errorf("dash does not go through its splitter: %v", dash)
	}
	if web := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute(); web.GetCluster() != ClusterName("web", "dc1", testTD) {
		t.Errorf("web routes to %v", web)
	}
	exists := func(string, string) bool { return true } // endpoints and secrets are shared
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), exists); err != nil {
		t.Errorf("inconsistent: %v", err)
	}
}

func TestIngressGatewayWithoutEntry(t *testing.T) {
	res, err := builder{dc: "dc1", trustDomain: testTD}.proxy(testGateway(nil))
	if err != nil || len(res.listeners) != 0 || res.service != "ingress" {
		t.Fatalf("res = %+v, %v", res, err)
	}
}

func TestIngressDomains(t *testing.T) {
	// One service's host with and without the listener's port: listed once
	// (Envoy refuses a route configuration naming a domain twice).
	if got := IngressDomains("web", []string{"web.example.com", "Web.example.com:8080"}, 8080); !reflect.DeepEqual(got, []string{"web.example.com", "web.example.com:8080"}) {
		t.Errorf("domains = %v", got)
	}
	if got := IngressDomains("a", []string{"*", "x.com:9", "*.y.com"}, 80); !reflect.DeepEqual(got, []string{"*", "x.com:9", "*.y.com", "*.y.com:80"}) {
		t.Errorf("domains = %v", got)
	}
}
