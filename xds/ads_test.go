package xds

import (
	"errors"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

const (
	webProxy = "web-1-sidecar-proxy"
	quiet    = 300 * time.Millisecond
)

// meshEnv: web (proxy with upstream db) and one db sidecar.
func meshEnv(t *testing.T) (*testEnv, string) {
	e := newEnv(t, hclog.Warn)
	e.plain("web-1", "web", "10.1.0.1", 8080)
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.proxy("db-1-sidecar-proxy", "db", "10.1.0.2", 21001)
	e.waitProxy(webProxy, 21000)
	e.waitProxy("db-1-sidecar-proxy", 21001)
	return e, ClusterName("db", "dc1", e.ca.td)
}

func endpointsOf(t *testing.T, m map[string]any, name string) []string {
	t.Helper()
	cla, ok := m[name].(*endpoint.ClusterLoadAssignment)
	if !ok {
		t.Fatalf("no load assignment %q in %v", name, keys(m))
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, ep := range l.GetLbEndpoints() {
			a := ep.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, a.GetAddress())
		}
	}
	return out
}

func asAny[V any](m map[string]V) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func wantNames(t *testing.T, what string, got map[string]any, want ...string) {
	t.Helper()
	if g := strings.Join(keys(got), ","); g != strings.Join(want, ",") {
		t.Fatalf("%s = %s, want %s", what, g, strings.Join(want, ","))
	}
}

func TestADSStateOfTheWorld(t *testing.T) {
	e, dbCluster := meshEnv(t)
	c := e.dial(webProxy, false)

	c.req(clusterType, nil, "", "", "")
	cds := c.next(clusterType)
	wantNames(t, "clusters", asAny(decode(t, cds)), dbCluster, LocalAppCluster)
	c.ack(cds)
	c.req(endpointType, []string{dbCluster}, "", "", "")
	eds := c.next(endpointType)
	if got := endpointsOf(t, asAny(decode(t, eds)), dbCluster); len(got) != 1 || got[0] != "10.1.0.2" {
		t.Fatalf("endpoints = %v", got)
	}
	c.ack(eds)
	c.req(listenerType, nil, "", "", "")
	lds := c.next(listenerType)
	wantNames(t, "listeners", asAny(decode(t, lds)), "db:127.0.0.1:9191", "public_listener:0.0.0.0:21000")
	c.ack(lds)
	c.req(secretType, []string{"leaf:web", RootsSecret}, "", "", "")
	sds := c.next(secretType)
	wantNames(t, "secrets", asAny(decode(t, sds)), "leaf:web", RootsSecret)
	c.ack(sds)

	// An endpoint joins: one EDS push with both endpoints, nothing else.
	e.proxy("db-2-sidecar-proxy", "db", "10.1.0.3", 21001)
	eds2 := c.next(endpointType)
	if got := endpointsOf(t, asAny(decode(t, eds2)), dbCluster); len(got) != 2 {
		t.Fatalf("endpoints after add = %v, want 2", got)
	}
	if parseVersion(eds2.GetVersionInfo()) <= parseVersion(eds.GetVersionInfo()) {
		t.Errorf("version did not increase: %s -> %s", eds.GetVersionInfo(), eds2.GetVersionInfo())
	}
	if n := c.count(listenerType, 50*time.Millisecond); n != 0 {
		t.Errorf("an endpoint change re-sent LDS %d times", n)
	}

	// NACK: the rejected version is not re-sent; the proxy is held.
	c.nack(eds2, eds.GetVersionInfo())
	if n := c.count(endpointType, quiet); n > 1 {
		t.Fatalf("NACKed EDS re-sent %d times in %s", n, quiet)
	}
	testutil.WaitFor(t, hangGuard, "rejection recorded", func() bool { return errors.Is(e.srv.ProxyError(webProxy), ErrRejected) })
	if got := e.srv.ProxyStatus(webProxy).Rejected[endpointType]; got != "test rejection" {
		t.Errorf("rejection detail = %q", got)
	}
	// New input: pushed again; its ACK clears the rejection.
	e.proxy("db-3-sidecar-proxy", "db", "10.1.0.4", 21001)
	eds3 := c.next(endpointType)
	if got := endpointsOf(t, asAny(decode(t, eds3)), dbCluster); len(got) != 3 {
		t.Fatalf("endpoints after second add = %v, want 3", got)
	}
	c.ack(eds3)
	testutil.WaitFor(t, hangGuard, "rejection cleared", func() bool { return e.srv.ProxyError(webProxy) == nil })

	// Deregistered while its stream is open (a sidecar in its
	// shutdown_delay): nothing is withdrawn; once the stream ends, its
	// listeners and clusters go away.
	deregisterDraining(t, e, func(d time.Duration) int {
		return c.count(listenerType, d) + c.count(clusterType, 10*time.Millisecond)
	}, c.close)
}

// deregisterDraining deregisters webProxy while its stream is open: no
// response may withdraw its config (pushed counts responses within a
// wait); after end closes the stream, its listeners and clusters leave
// the cache.
func deregisterDraining(t *testing.T, e *testEnv, pushed func(time.Duration) int, end func()) {
	t.Helper()
	if err := e.cat.Deregister(webProxy); err != nil {
		t.Fatal(err)
	}
	if n := pushed(quiet); n != 0 {
		t.Fatalf("deregistering a connected proxy pushed %d responses; its config must stay while its stream lives", n)
	}
	if n := len(e.srv.cache.names(listenerType, webProxy)); n == 0 {
		t.Fatal("a draining proxy's listeners left the cache")
	}
	end()
	testutil.WaitFor(t, hangGuard, "listeners and clusters removed after the stream ended", func() bool {
		return len(e.srv.cache.names(listenerType, webProxy)) == 0 && len(e.srv.cache.names(clusterType, webProxy)) == 0
	})
}

func TestADSStateOfTheWorldFirstResponseNack(t *testing.T) {
	e, _ := meshEnv(t)
	c := e.dial(webProxy, false)
	c.req(listenerType, nil, "", "", "")
	lds := c.next(listenerType)
	c.nack(lds, "") // nothing accepted yet: version_info stays empty
	if n := c.count(listenerType, quiet); n != 0 {
		t.Fatalf("NACK of the first LDS response answered %d times", n)
	}
}

func TestADSDelta(t *testing.T) {
	e, dbCluster := meshEnv(t)
	c := e.dial(webProxy, true)

	c.dreq(clusterType, nil, nil, "", "")
	cds := c.dnext(clusterType)
	wantNames(t, "clusters", asAny(decode(t, cds)), dbCluster, LocalAppCluster)
	c.ack(cds)
	c.dreq(endpointType, []string{dbCluster}, nil, "", "")
	eds := c.dnext(endpointType)
	if got := endpointsOf(t, asAny(decode(t, eds)), dbCluster); len(got) != 1 {
		t.Fatalf("endpoints = %v", got)
	}
	c.ack(eds)
	c.dreq(listenerType, nil, nil, "", "")
	lds := c.dnext(listenerType)
	wantNames(t, "listeners", asAny(decode(t, lds)), "db:127.0.0.1:9191", "public_listener:0.0.0.0:21000")
	c.ack(lds)
	c.dreq(secretType, []string{"leaf:web", RootsSecret}, nil, "", "")
	sds := c.dnext(secretType)
	wantNames(t, "secrets", asAny(decode(t, sds)), "leaf:web", RootsSecret)
	c.ack(sds)

	// An endpoint joins: exactly the changed CLA is sent.
	e.proxy("db-2-sidecar-proxy", "db", "10.1.0.3", 21001)
	eds2 := c.dnext(endpointType)
	got := asAny(decode(t, eds2))
	wantNames(t, "delta EDS resources", got, dbCluster)
	if eps := endpointsOf(t, got, dbCluster); len(eps) != 2 || len(eds2.GetRemovedResources()) != 0 {
		t.Fatalf("endpoints = %v removed = %v", eps, eds2.GetRemovedResources())
	}

	// NACK: no re-send loop.
	c.nack(eds2, "")
	if n := c.count(endpointType, quiet); n > 1 {
		t.Fatalf("NACKed delta EDS re-sent %d times in %s", n, quiet)
	}
	testutil.WaitFor(t, hangGuard, "rejection recorded", func() bool { return errors.Is(e.srv.ProxyError(webProxy), ErrRejected) })

	// A proxy's own change: only its listener set changes; the removed
	// upstream's listener and cluster are listed as removed.
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "api", LocalBindPort: 9292})
	// Order: new cluster, then listeners (new one added, old one removed),
	// then the unused cluster and its endpoints are withdrawn.
	cds2 := c.dnext(clusterType)
	wantNames(t, "added clusters", asAny(decode(t, cds2)), ClusterName("api", "dc1", e.ca.td))
	c.ack(cds2)
	lds2 := c.dnext(listenerType)
	wantNames(t, "added listeners", asAny(decode(t, lds2)), "api:127.0.0.1:9292")
	if r := lds2.GetRemovedResources(); len(r) != 1 || r[0] != "db:127.0.0.1:9191" {
		t.Fatalf("removed listeners = %v", r)
	}
	c.ack(lds2)
	cds3 := c.dnext(clusterType)
	if r := cds3.GetRemovedResources(); len(r) != 1 || r[0] != dbCluster || len(cds3.GetResources()) != 0 {
		t.Fatalf("second CDS update: resources %d removed %v", len(cds3.GetResources()), r)
	}
	c.ack(cds3)
	eds3 := c.dnext(endpointType) // db's CLA is no longer used by anyone
	if r := eds3.GetRemovedResources(); len(r) != 1 || r[0] != dbCluster {
		t.Fatalf("removed endpoints = %v", r)
	}
	c.ack(eds3)

	// Deregistered while connected: nothing is withdrawn until the
	// stream ends.
	deregisterDraining(t, e, func(d time.Duration) int {
		return c.count(listenerType, d) + c.count(clusterType, 10*time.Millisecond)
	}, c.close)
}

// A change to one proxy pushes nothing to another.
func TestOnlyAffectedProxiesArePushed(t *testing.T) {
	e, _ := meshEnv(t)
	e.proxy("api-1-sidecar-proxy", "api", "10.1.0.5", 21002, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.waitProxy("api-1-sidecar-proxy", 21002)
	other := e.dial("api-1-sidecar-proxy", false)
	other.req(listenerType, nil, "", "", "")
	other.ack(other.next(listenerType))
	other.req(clusterType, nil, "", "", "")
	other.ack(other.next(clusterType))
	calls := e.ca.leafCalls("api")

	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9999})
	testutil.WaitFor(t, hangGuard, "web's new listener", func() bool {
		return e.srv.cache.get(listenerType, webProxy, "db:127.0.0.1:9999") != nil
	})
	if n := other.count(listenerType, quiet) + other.count(clusterType, 0); n != 0 {
		t.Errorf("unrelated proxy got %d LDS/CDS pushes", n)
	}
	if got := e.ca.leafCalls("api"); got != calls {
		t.Errorf("unrelated leaf fetched again (%d -> %d)", calls, got)
	}
}

func TestSecretRotation(t *testing.T) {
	e, _ := meshEnv(t)
	c := e.dial(webProxy, true)
	c.dreq(secretType, []string{"leaf:web", RootsSecret}, nil, "", "")
	first := c.dnext(secretType)
	before := decode(t, first)
	wantNames(t, "secrets", asAny(before), "leaf:web", RootsSecret)
	c.ack(first)

	renewed := e.ca.renew("web")
	r := c.dnext(secretType)
	got := decode(t, r)
	wantNames(t, "renewed secrets", asAny(got), "leaf:web")
	if chain := secretCert(got["leaf:web"]); chain != renewed.CertPEM {
		t.Fatal("renewed leaf not pushed")
	}
	c.ack(r)

	e.ca.rotate()
	var roots, leaf string
	testutil.WaitFor(t, hangGuard, "new roots and leaf", func() bool {
		m := c.pull(secretType, 100*time.Millisecond)
		if m == nil {
			return false
		}
		c.ack(m)
		for name, s := range decode(t, m) {
			if name == RootsSecret {
				roots = secretRoots(s)
			} else {
				leaf = secretCert(s)
			}
		}
		return roots == e.ca.Roots().Roots[0].RootCertPEM && leaf != "" && leaf != renewed.CertPEM
	})
	if err := verifyChain(leaf, roots, SpiffeID(e.ca.td, "dc1", "web")); err != nil {
		t.Fatalf("pushed leaf does not chain to pushed roots: %v", err)
	}
}

func TestEscapeHatch(t *testing.T) {
	e := newEnv(t, hclog.Error)
	good := `{"name":"custom_public","address":{"socket_address":{"address":"0.0.0.0","port_value":21000}},
	  "filter_chains":[{"filters":[{"name":"envoy.filters.network.tcp_proxy","typed_config":{
	  "@type":"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy","stat_prefix":"x","cluster":"local_app"}}]}]}`
	reg := func(cfg map[string]any) {
		e.cat.Register(testProxy("p1", "web", 21000, cfg))
	}
	reg(map[string]any{"envoy_public_listener_json": good})
	testutil.WaitFor(t, hangGuard, "custom listener", func() bool { return e.srv.cache.get(listenerType, "p1", "custom_public") != nil })
	if err := e.srv.ProxyError("p1"); err != nil {
		t.Fatalf("ProxyError = %v", err)
	}

	reg(map[string]any{"envoy_public_listener_json": `{"name": 42`})
	testutil.WaitFor(t, hangGuard, "config error", func() bool { return e.srv.ProxyError("p1") != nil })
	err := e.srv.ProxyError("p1")
	if !errors.Is(err, ErrInvalidProxyConfig) || !strings.Contains(err.Error(), "envoy_public_listener_json") {
		t.Fatalf("ProxyError = %v", err)
	}
	if e.srv.cache.get(listenerType, "p1", "custom_public") == nil {
		t.Error("last good listener was dropped")
	}

	// References a cluster nobody serves: inconsistent, refused.
	bad := strings.Replace(good, `"cluster":"local_app"`, `"cluster":"nowhere"`, 1)
	reg(map[string]any{"envoy_public_listener_json": bad})
	testutil.WaitFor(t, hangGuard, "inconsistency", func() bool { return errors.Is(e.srv.ProxyError("p1"), ErrInconsistent) })

	reg(nil)
	testutil.WaitFor(t, hangGuard, "generated listener", func() bool {
		return e.srv.cache.get(listenerType, "p1", "public_listener:0.0.0.0:21000") != nil
	})
	if err := e.srv.ProxyError("p1"); err != nil {
		t.Fatalf("error not cleared: %v", err)
	}
	if e.srv.cache.get(listenerType, "p1", "custom_public") != nil {
		t.Error("custom listener not removed")
	}
}

// A missing leaf holds the proxy back (never a listener pointing at a
// secret that is not served) and is retried.
func TestLeafFailureHoldsProxy(t *testing.T) {
	e := newEnv(t, hclog.Error)
	e.ca.setLeafErr("web", errors.New("signing rate limited"))
	e.cat.Register(testProxy("p1", "web", 21000, nil))
	// The second attempt proves the first reconcile finished.
	testutil.WaitFor(t, hangGuard, "leaf retried", func() bool { return e.ca.leafCalls("web") >= 2 })
	if e.srv.cache.get(listenerType, "p1", "public_listener:0.0.0.0:21000") != nil {
		t.Fatal("listener published without its leaf")
	}
	e.ca.setLeafErr("web", nil)
	testutil.WaitFor(t, hangGuard, "listener after retry", func() bool {
		return e.srv.cache.get(listenerType, "p1", "public_listener:0.0.0.0:21000") != nil && e.srv.cache.has(secretType, "", "leaf:web")
	})
}
