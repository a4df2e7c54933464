package xds

import (
	"reflect"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
	"github.com/meshlet/meshlet/internal/testutil"
)

func testTerminating(port int) catalog.ServiceInstance {
	return catalog.ServiceInstance{ID: "tgw-1", Name: "tgw", Kind: catalog.KindTerminatingGateway, Address: "10.0.0.7", Port: port,
		Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "tgw", Config: map[string]any{"connect_timeout_ms": 2000}}}
}

func terminatingEntry() *consul.TerminatingGatewayConfigEntry {
	return &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{
		{Name: "db"},
		{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "/etc/ssl/c.pem", KeyFile: "/etc/ssl/k.pem", SNI: "api.example.com"},
	}}
}

func TestTerminatingGatewayResources(t *testing.T) {
	insts := map[string][]catalog.ServiceInstance{
		"db": {
			{ID: "db-ext", Name: "db", Address: "192.0.2.10", Port: 5432, Healthy: true},
			{ID: "db-down", Name: "db", Address: "192.0.2.11", Port: 5432},
			{ID: "db-proxy", Name: "db", Kind: catalog.KindConnectProxy, Address: "10.0.0.2", Port: 21000, Healthy: true},
		},
		"api": {{ID: "api-ext", Name: "api", Address: "192.0.2.20", Port: 443, Healthy: true}},
	}
	b := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(terminatingEntry()),
		instances: func(svc string) []catalog.ServiceInstance { return insts[svc] }}
	res, err := b.proxy(testTerminating(23000))
	if err != nil {
		t.Fatal(err)
	}
	if res.service != "tgw" || !reflect.DeepEqual(res.linked, []string{"db", "api"}) {
		t.Errorf("identity %q, linked %v", res.service, res.linked)
	}
	if len(res.listeners) != 1 || res.listeners[0].GetName() != "default:0.0.0.0:23000" {
		t.Fatalf("listeners = %v", res.listeners)
	}
	l := res.listeners[0]
	if err := envoyvalidate.All(l); err != nil {
		t.Errorf("listener: %v", err)
	}
	if len(l.GetListenerFilters()) != 1 || l.GetListenerFilters()[0].GetName() != tlsInspectorFilter {
		t.Errorf("listener filters = %v", l.GetListenerFilters())
	}
	for i, svc := range []string{"db", "api"} {
		fc := l.GetFilterChains()[i]
		sni := ClusterName(svc, "dc1", testTD)
		if got := fc.GetFilterChainMatch().GetServerNames(); !reflect.DeepEqual(got, []string{sni}) {
			t.Errorf("chain %d matches %v, want %s", i, got, sni)
		}
		down := unpack(t, fc.GetTransportSocket().GetTypedConfig(), &tlsv3.DownstreamTlsContext{})
		if leaf := down.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName(); leaf != LeafSecretName(svc) || !down.GetRequireClientCertificate().GetValue() {
			t.Errorf("chain %d presents %q (client cert required: %v)", i, leaf, down.GetRequireClientCertificate())
		}
		if fs := fc.GetFilters(); len(fs) != 2 || fs[0].GetName() != extAuthzFilter {
			t.Fatalf("chain %d filters = %v", i, fs)
		}
		if tp := unpack(t, fc.GetFilters()[1].GetTypedConfig(), &tcpproxy.TcpProxy{}); tp.GetCluster() != sni {
			t.Errorf("chain %d proxies to %q", i, tp.GetCluster())
		}
	}
	if len(res.clusters) != 2 {
		t.Fatalf("clusters = %v", res.clusters)
	}
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		if c.GetConnectTimeout().AsDuration() != 2*time.Second {
			t.Errorf("cluster %s: connect timeout %s", c.GetName(), c.GetConnectTimeout().AsDuration())
		}
	}
	db, api := res.clusters[0], res.clusters[1]
	if got := claAddrs(db.GetLoadAssignment()); !reflect.DeepEqual(got, []string{"192.0.2.10"}) || db.GetTransportSocket() != nil {
		t.Errorf("db cluster endpoints %v, TLS %v", got, db.GetTransportSocket())
	}
	up := unpack(t, api.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
	ctx := up.GetCommonTlsContext()
	if up.GetSni() != "api.example.com" || ctx.GetValidationContext().GetTrustedCa().GetFilename() != "/etc/ssl/ca.pem" ||
		ctx.GetTlsCertificates()[0].GetCertificateChain().GetFilename() != "/etc/ssl/c.pem" ||
		ctx.GetTlsCertificates()[0].GetPrivateKey().GetFilename() != "/etc/ssl/k.pem" {
		t.Errorf("api origination TLS = %v", up)
	}
	exists := func(string, string) bool { return true }
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), exists); err != nil {
		t.Errorf("inconsistent: %v", err)
	}
}

func claAddrs(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	return out
}

func TestTerminatingGatewayWithoutEntry(t *testing.T) {
	res, err := builder{dc: "dc1", trustDomain: testTD}.proxy(testTerminating(23000))
	if err != nil || len(res.listeners) != 0 || res.service != "tgw" || len(res.linked) != 0 {
		t.Fatalf("res = %+v, %v", res, err)
	}
}

// Over the server: a mesh upstream to a linked service gets the gateway's
// address as its endpoints, following the gateway's registrations, and
// the gateway gets its linked services' leaves (and only those).
func TestTerminatingGatewayServed(t *testing.T) {
	reg := configentry.NewRegistry()
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) { c.ConfigEntries = reg })
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.cat.Register(catalog.ServiceInstance{ID: "db-ext", Name: "db", Address: "192.0.2.10", Port: 5432, Healthy: true})
	e.waitProxy(webProxy, 21000)
	dbCluster := ClusterName("db", "dc1", e.ca.td)
	claOf := func() []string {
		cla, _ := e.srv.cache.get(endpointType, "", dbCluster).(*endpoint.ClusterLoadAssignment)
		return claAddrs(cla)
	}
	reg.Replace(configentry.NewSet(terminatingEntry()), 1)
	gw := testTerminating(23000)
	e.cat.Register(gw)
	testutil.WaitFor(t, hangGuard, "db resolves to the gateway", func() bool {
		return reflect.DeepEqual(claOf(), []string{"10.0.0.7"})
	})
	testutil.WaitFor(t, hangGuard, "gateway listener published", func() bool {
		return e.srv.cache.get(listenerType, gw.ID, TerminatingListenerName(23000)) != nil
	})
	for _, svc := range []string{"db", "api"} {
		if e.srv.cache.get(secretType, "", LeafSecretName(svc)) == nil {
			t.Errorf("leaf of linked %s not published", svc)
		}
	}
	g := proxyGrant(gw.ID, gw)
	if !e.srv.linkedLeaf(&g, LeafSecretName("api")) || e.srv.linkedLeaf(&g, LeafSecretName("web")) || g.allowsSecret(LeafSecretName("web")) {
		t.Error("the gateway's grant must cover its linked services' leaves and no other")
	}
	moved := gw
	moved.Address = "10.0.0.8"
	e.cat.Register(moved)
	testutil.WaitFor(t, hangGuard, "db follows the gateway", func() bool {
		return reflect.DeepEqual(claOf(), []string{"10.0.0.8"})
	})
	e.cat.Register(catalog.ServiceInstance{ID: "db-ext-2", Name: "db", Address: "192.0.2.12", Port: 5432, Healthy: true})
	testutil.WaitFor(t, hangGuard, "gateway cluster follows the external service", func() bool {
		c, _ := e.srv.cache.get(clusterType, gw.ID, dbCluster).(interface {
			GetLoadAssignment() *endpoint.ClusterLoadAssignment
		})
		return c != nil && len(claAddrs(c.GetLoadAssignment())) == 2
	})
}

// A linked service whose service-defaults say http gets an HTTP connection
// manager (with the per-request authorization) in its chain.
func TestTerminatingGatewayHTTPService(t *testing.T) {
	set := configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "http"},
		&consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{{Name: "db"}}},
	)
	res, err := builder{dc: "dc1", trustDomain: testTD, set: set}.proxy(testTerminating(23000))
	if err != nil {
		t.Fatal(err)
	}
	l := res.listeners[0]
	if err := envoyvalidate.All(l); err != nil {
		t.Fatal(err)
	}
	fs := l.GetFilterChains()[0].GetFilters()
	if len(fs) != 2 || fs[1].GetName() != hcmFilter {
		t.Fatalf("filters = %v", fs)
	}
	m, err := unpackHCM(fs[1])
	if err != nil {
		t.Fatal(err)
	}
	if hf := m.GetHttpFilters(); len(hf) != 2 || hf[1].GetName() != routerFilter {
		t.Errorf("http filters = %v", hf)
	}
	if c := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); c != ClusterName("db", "dc1", testTD) {
		t.Errorf("routes to %q", c)
	}
}
