package sidecar

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/meshlet/meshlet/internal/testutil"
)

// Test 10: HTTP through two proxies. web's upstream listener runs an HTTP
// connection manager with routes over RDS (delta xDS); api's public listener
// (mTLS + ext_authz) runs one with an inline route config (SotW) to the app.
func TestHTTPThroughTwoProxies(t *testing.T) {
	cp := newControlPlane(t)
	ca := newTestCA(t, "root-1")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from api path=%s host=%s", r.URL.Path, r.Host)
	}))
	t.Cleanup(app.Close)
	webPort, apiPort := freePort(t), freePort(t)
	apiCluster := sniFor("api")

	webRoutes := routeToCluster("api", apiCluster)
	webRoutes.VirtualHosts[0].Routes[0].Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}}
	cp.set("web-sidecar-proxy", map[string][]types.Resource{
		typeListener: {upstreamListener("api", webPort, hcmFilter(t, "upstream.api", nil, "api"))},
		typeRoute:    {webRoutes},
		typeCluster:  {upstreamCluster(t, "api", "leaf", "roots")},
		typeEndpoint: {cla(apiCluster, fmt.Sprintf("127.0.0.1:%d", apiPort))},
		typeSecret:   {certSecret("leaf", ca.leaf(t, spiffeID("web"))), rootsSecret("roots", ca)},
	})
	cp.set("api-sidecar-proxy", map[string][]types.Resource{
		typeListener: {publicListener(t, apiPort, "leaf", "roots", hcmFilter(t, "public_listener", routeToCluster("local_app", "local_app"), ""))},
		typeCluster:  {localAppCluster(app.Listener.Addr().String())},
		typeSecret:   {certSecret("leaf", ca.leaf(t, spiffeID("api"))), rootsSecret("roots", ca)},
	})
	web := startProxy(t, "web-sidecar-proxy", "web", cp.tcpAddr, true)
	api := startProxy(t, "api-sidecar-proxy", "api", cp.unixAddr(), false)
	testutil.WaitFor(t, waitTimeout, "web ready", web.Ready)
	testutil.WaitFor(t, waitTimeout, "api ready", api.Ready)

	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", webPort, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: failed to read the body: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	for i := 0; i < 3; i++ {
		code, body := get("/v1/things")
		if code != http.StatusOK || !strings.Contains(body, "hello from api path=/v1/things") {
			t.Fatalf("GET /v1/things = %d %q", code, body)
		}
	}
	if code, _ := get("/other"); code != http.StatusNotFound {
		t.Fatalf("GET /other = %d, want 404 (no route)", code)
	}
	if n := statValue(t, api, "ext_authz.connect_authz.ok"); n < 1 {
		t.Fatalf("api ext_authz ok = %d, want >= 1", n)
	}
	if n := statValue(t, web, "cluster."+apiCluster+".upstream_rq_2xx"); n != 3 {
		t.Fatalf("web upstream_rq_2xx = %d, want 3", n)
	}
	if n := statValue(t, web, "http.upstream.api.no_route"); n != 1 {
		t.Fatalf("web no_route = %d, want 1", n)
	}
}
