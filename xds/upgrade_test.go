package xds

import (
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// checkWebsocketHCMs fails unless every HTTP connection manager of ls
// lists exactly the websocket upgrade (as Consul's do; Envoy refuses any
// upgrade type not listed) and every listener validates; it returns how
// many HCMs it checked.
func checkWebsocketHCMs(t *testing.T, ls []*listener.Listener) int {
	t.Helper()
	n := 0
	for _, l := range ls {
		if err := envoyvalidate.All(l); err != nil {
			t.Errorf("listener %s: %v", l.GetName(), err)
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				n++
				ucs := unpack(t, f.GetTypedConfig(), &hcm.HttpConnectionManager{}).GetUpgradeConfigs()
				if len(ucs) != 1 || ucs[0].GetUpgradeType() != "websocket" || ucs[0].GetEnabled() != nil || len(ucs[0].GetFilters()) != 0 {
					t.Errorf("listener %s: upgrade_configs = %v, want websocket alone", l.GetName(), ucs)
				}
			}
		}
	}
	return n
}

// The HTTP connection managers of sidecars (public, inline and RDS
// upstream listeners, exposed paths), ingress gateways and terminating
// gateways' HTTP chains relay websocket upgrades.
func TestHTTPManagersAllowWebsocket(t *testing.T) {
	inst := exposeProxy(catalog.ExposePath{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: 25001})
	inst.Proxy.Config = map[string]any{"protocol": "http"}
	inst.Proxy.Upstreams = []catalog.Upstream{{DestinationName: "api", LocalBindPort: 9292, Config: map[string]any{"protocol": "http"}}}
	res, err := (builder{dc: "dc1", trustDomain: testTD}).proxy(inst)
	if err != nil {
		t.Fatal(err)
	}
	if n := checkWebsocketHCMs(t, res.listeners); n != 3 {
		t.Errorf("sidecar: %d HTTP connection managers, want public, upstream and exposed path", n)
	}
	gw, err := (builder{dc: "dc1", trustDomain: testTD, set: ingressSet(t)}).proxy(testGateway(nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := checkWebsocketHCMs(t, gw.listeners); n != 1 {
		t.Errorf("ingress: %d HTTP connection managers, want 1", n)
	}
	rds, err := rdsListener("api", "127.0.0.1", 9393, "api")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := publicChain("api", protoHTTP, inboundRoute{}, ClusterName("api", "dc1", testTD))
	if err != nil {
		t.Fatal(err)
	}
	term := &listener.Listener{Name: TerminatingListenerName(8443), Address: socketAddress(publicBindAddr, 8443), FilterChains: []*listener.FilterChain{fc}}
	if n := checkWebsocketHCMs(t, []*listener.Listener{rds, term}); n != 2 {
		t.Errorf("RDS and terminating chains: %d HTTP connection managers, want 2", n)
	}
}
