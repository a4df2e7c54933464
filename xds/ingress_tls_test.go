package xds

import (
	"reflect"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func tlsIngressSet(t *testing.T, e *consul.IngressGatewayConfigEntry) *configentry.Set {
	t.Helper()
	e.Kind, e.Name = consul.IngressGateway, "ingress"
	set := configentry.NewSet()
	for _, x := range []configentry.Entry{e, &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}} {
		if err := set.Check(x); err != nil {
			t.Fatal(err)
		}
		set = set.With(x)
	}
	return set
}

func downstreamTLSOf(t *testing.T, l *listener.Listener) *tlsv3.DownstreamTlsContext {
	t.Helper()
	ts := l.GetFilterChains()[0].GetTransportSocket()
	if ts == nil {
		return nil
	}
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

func TestIngressTLSFromMeshCA(t *testing.T) {
	e := &consul.IngressGatewayConfigEntry{
		TLS: consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_2", TLSMaxVersion: "TLSv1_3"},
		Listeners: []consul.IngressListener{
			{Port: 8443, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com:8443", "www.example.com"}}},
				TLS: &consul.GatewayTLSConfig{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}},
			{Port: 9443, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}, TLS: &consul.GatewayTLSConfig{TLSMinVersion: "TLSv1_3"}},
		}}
	b := builder{dc: "dc1", trustDomain: testTD, set: tlsIngressSet(t, e)}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatalf("listener %s: %v", l.GetName(), err)
		}
		ctx := downstreamTLSOf(t, l)
		if ctx == nil || ctx.GetRequireClientCertificate().GetValue() {
			t.Fatalf("listener %s: TLS %v", l.GetName(), ctx)
		}
		sds := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()
		if len(sds) != 1 || sds[0].GetName() != LeafSecretName("ingress") {
			t.Fatalf("listener %s: certificate %v", l.GetName(), sds)
		}
	}
	p := downstreamTLSOf(t, res.listeners[0]).GetCommonTlsContext().GetTlsParams()
	if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
		!reflect.DeepEqual(p.GetCipherSuites(), []string{"ECDHE-ECDSA-AES128-GCM-SHA256"}) {
		t.Errorf("http listener tls_params = %v", p)
	}
	if v := downstreamTLSOf(t, res.listeners[1]).GetCommonTlsContext().GetTlsParams().GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLSv1_3 {
		t.Errorf("tcp listener min version = %v (the listener's tls wins)", v)
	}
	want := []string{"*.ingress.consul", "*.ingress.dc1.consul", "web.example.com", "www.example.com"}
	if !res.setsLeafDNS || !reflect.DeepEqual(res.leafDNS, want) {
		t.Errorf("leaf DNS SANs = %v, want %v", res.leafDNS, want)
	}
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
}

func TestIngressTLSExternalSDS(t *testing.T) {
	e := &consul.IngressGatewayConfigEntry{
		TLS: consul.GatewayTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "sds-cluster", CertResource: "example.com-cert"}},
		Listeners: []consul.IngressListener{
			{Port: 8443, Protocol: "http", Services: []consul.IngressService{{Name: "web"}}},
			{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}, TLS: &consul.GatewayTLSConfig{}},
		}}
	b := builder{dc: "dc1", trustDomain: testTD, set: tlsIngressSet(t, e)}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatalf("listener %s: %v", l.GetName(), err)
		}
		sds := downstreamTLSOf(t, l).GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0]
		api := sds.GetSdsConfig().GetApiConfigSource()
		if sds.GetName() != "example.com-cert" || api.GetApiType() != core.ApiConfigSource_GRPC ||
			api.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-cluster" || api.GetTransportApiVersion() != core.ApiVersion_V3 {
			t.Fatalf("listener %s: sds %v", l.GetName(), sds)
		}
	}
	if res.leafDNS != nil {
		t.Errorf("leaf DNS SANs with SDS only = %v", res.leafDNS)
	}
	// The external secret and cluster are the bootstrap's: not ours to serve.
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
}

func TestIngressWithoutTLS(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD, set: ingressSet(t)}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.listeners {
		if downstreamTLSOf(t, l) != nil {
			t.Errorf("listener %s has TLS", l.GetName())
		}
	}
	if res.leafDNS != nil {
		t.Errorf("leaf DNS SANs = %v", res.leafDNS)
	}
}

// A service's own certificate from SDS: its filter chain chosen by SNI
// (its hosts) with only its routes, before the listener's default chain.
func TestIngressServiceSDS(t *testing.T) {
	e := &consul.IngressGatewayConfigEntry{
		TLS: consul.GatewayTLSConfig{Enabled: true, SDS: &consul.GatewayTLSSDSConfig{ClusterName: "sds-cluster", CertResource: "default-cert"}},
		Listeners: []consul.IngressListener{{Port: 8443, Protocol: "http", Services: []consul.IngressService{
			{Name: "web", Hosts: []string{"web.example.com:8443"}, TLS: &consul.GatewayServiceTLSConfig{SDS: &consul.GatewayTLSSDSConfig{CertResource: "web-cert"}}},
			{Name: "api"},
		}}}}
	b := builder{dc: "dc1", trustDomain: testTD, set: tlsIngressSet(t, e)}
	res, err := b.proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	l := res.listeners[0]
	if err := envoyvalidate.All(l); err != nil {
		t.Fatal(err)
	}
	if len(l.GetFilterChains()) != 2 || len(l.GetListenerFilters()) != 1 {
		t.Fatalf("filter chains %d, listener filters %v", len(l.GetFilterChains()), l.GetListenerFilters())
	}
	web, def := l.GetFilterChains()[0], l.GetFilterChains()[1]
	if got := web.GetFilterChainMatch().GetServerNames(); !reflect.DeepEqual(got, []string{"web.example.com"}) {
		t.Errorf("web's chain matches %v", got)
	}
	certOf := func(fc *listener.FilterChain) *tlsv3.SdsSecretConfig {
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0]
	}
	if c := certOf(web); c.GetName() != "web-cert" || c.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-cluster" {
		t.Errorf("web's certificate = %v", c)
	}
	if c := certOf(def); c.GetName() != "default-cert" || def.GetFilterChainMatch() != nil {
		t.Errorf("default chain: certificate %v, match %v", c, def.GetFilterChainMatch())
	}
	var names []string
	for _, r := range res.routes {
		names = append(names, r.GetName())
		if err := envoyvalidate.All(r); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(names, []string{"8443", "8443_web"}) || len(res.routes[1].GetVirtualHosts()) != 1 || res.routes[1].GetVirtualHosts()[0].GetName() != "web" {
		t.Fatalf("routes %v", names)
	}
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
}
