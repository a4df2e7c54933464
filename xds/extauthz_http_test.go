package xds

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpauthz "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// checkHTTPAuthz asserts an HTTP public listener: network ext_authz, then
// an HCM whose filters are the HTTP ext_authz (agent, V3, peer
// certificate, fail closed) then the router.
func checkHTTPAuthz(t *testing.T, l *listener.Listener) {
	t.Helper()
	fs := l.GetFilterChains()[0].GetFilters()
	if len(fs) != 2 || fs[0].GetName() != extAuthzFilter || fs[1].GetName() != hcmFilter {
		t.Fatalf("public filters = %v, want network ext_authz then HCM", fs)
	}
	hf := hcmOf(t, l).GetHttpFilters()
	if len(hf) != 2 || hf[0].GetName() != "envoy.filters.http.ext_authz" || hf[1].GetName() != routerFilter {
		t.Fatalf("http filters = %v, want ext_authz then router", hf)
	}
	if m := hcmOf(t, l); !m.GetNormalizePath().GetValue() || !m.GetMergeSlashes() {
		t.Errorf("public HCM normalize_path=%v merge_slashes=%v; want both (L7 intentions judge the path the app sees)",
			m.GetNormalizePath().GetValue(), m.GetMergeSlashes())
	}
	az := unpack(t, hf[0].GetTypedConfig(), &httpauthz.ExtAuthz{})
	if az.GetGrpcService().GetEnvoyGrpc().GetClusterName() != LocalAgentCluster || az.GetTransportApiVersion() != core.ApiVersion_V3 ||
		!az.GetIncludePeerCertificate() || az.GetFailureModeAllow() {
		t.Errorf("http ext_authz = %v", az)
	}
}

// The service's protocol from its service-defaults makes its public
// listener HTTP (with per-request authorization) even when the proxy
// config says nothing.
func TestPublicListenerProtocolFromEntries(t *testing.T) {
	set := configentry.NewSet(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"})
	b := builder{dc: "dc1", trustDomain: testTD, set: set}
	res, err := b.proxy(testProxy("p1", "web", 21000, nil))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	checkHTTPAuthz(t, res.listeners[0])
	// An explicit proxy config protocol still wins.
	res, err = b.proxy(testProxy("p1", "web", 21000, map[string]any{"protocol": "tcp"}))
	if err != nil {
		t.Fatal(err)
	}
	if fs := res.listeners[0].GetFilterChains()[0].GetFilters(); fs[len(fs)-1].GetName() != tcpProxyFilter {
		t.Errorf("explicit tcp: filters = %v", fs)
	}
}
