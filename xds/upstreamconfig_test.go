package xds

import (
	"errors"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

func intp(v int) *int                     { return &v }
func u32p(v uint32) *uint32               { return &v }
func durp(v time.Duration) *time.Duration { return &v }
func sdEntry(name string) *consul.ServiceConfigEntry {
	return &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: name}
}

// entriesBuilder builds with the real compiler over these entries.
func entriesBuilder(t *testing.T, entries ...configentry.Entry) builder {
	t.Helper()
	for _, e := range entries {
		if err := configentry.Validate(e); err != nil {
			t.Fatalf("Validate(%s): %v", e.GetName(), err)
		}
	}
	return builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(entries...)}
}

// The caller's service-defaults UpstreamConfig: Defaults for every
// upstream, an Override for one; the clusters carry circuit breakers,
// outlier detection and connect timeouts, and pass Envoy's validation.
func TestUpstreamConfigDefaultsAndOverrides(t *testing.T) {
	web := sdEntry("web")
	web.UpstreamConfig = &consul.UpstreamConfiguration{
		Defaults: &consul.UpstreamConfig{
			ConnectTimeoutMs: 1200,
			Limits:           &consul.UpstreamLimits{MaxConnections: intp(10), MaxPendingRequests: intp(20), MaxConcurrentRequests: intp(30)},
			PassiveHealthCheck: &consul.PassiveHealthCheck{Interval: 2 * time.Second, MaxFailures: 3,
				EnforcingConsecutive5xx: u32p(80), MaxEjectionPercent: u32p(50), BaseEjectionTime: durp(7 * time.Second)},
		},
		Overrides: []*consul.UpstreamConfig{{
			Name: "db", ConnectTimeoutMs: 300,
			Limits: &consul.UpstreamLimits{MaxConcurrentRequests: intp(2)},
		}},
	}
	b := entriesBuilder(t, web)
	res, err := b.proxy(testProxy("p1", "web", 21000, nil,
		catalog.Upstream{DestinationName: "api", LocalBindPort: 9191},
		catalog.Upstream{DestinationName: "db", LocalBindPort: 9192}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	api := clusterByName(res, ClusterName("api", "dc1", testTD))
	if got := api.GetConnectTimeout().AsDuration(); got != 1200*time.Millisecond {
		t.Errorf("api connect timeout = %v, want 1.2s", got)
	}
	th := api.GetCircuitBreakers().GetThresholds()
	if len(th) != 1 || th[0].GetMaxConnections().GetValue() != 10 || th[0].GetMaxPendingRequests().GetValue() != 20 || th[0].GetMaxRequests().GetValue() != 30 {
		t.Errorf("api thresholds = %v", th)
	}
	od := api.GetOutlierDetection()
	if od.GetConsecutive_5Xx().GetValue() != 3 || od.GetInterval().AsDuration() != 2*time.Second ||
		od.GetEnforcingConsecutive_5Xx().GetValue() != 80 || od.GetMaxEjectionPercent().GetValue() != 50 ||
		od.GetBaseEjectionTime().AsDuration() != 7*time.Second {
		t.Errorf("api outlier detection = %v", od)
	}
	db := clusterByName(res, ClusterName("db", "dc1", testTD))
	if got := db.GetConnectTimeout().AsDuration(); got != 300*time.Millisecond {
		t.Errorf("db connect timeout = %v, want 300ms (override beats defaults)", got)
	}
	th = db.GetCircuitBreakers().GetThresholds()
	if len(th) != 1 || th[0].GetMaxRequests().GetValue() != 2 || th[0].GetMaxConnections() != nil || th[0].GetMaxPendingRequests() != nil {
		t.Errorf("db thresholds = %v, want only max_requests 2 (Limits replaced whole)", th)
	}
	if db.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 3 {
		t.Errorf("db keeps the defaults' passive health check: %v", db.GetOutlierDetection())
	}
	// Another service's proxy is untouched.
	res, err = b.proxy(testProxy("p2", "other", 21001, nil, catalog.Upstream{DestinationName: "api", LocalBindPort: 9191}))
	if err != nil {
		t.Fatal(err)
	}
	c := clusterByName(res, ClusterName("api", "dc1", testTD))
	if c.GetCircuitBreakers() != nil || c.GetOutlierDetection() != nil || c.GetConnectTimeout().AsDuration() != 5*time.Second {
		t.Errorf("other's cluster = %v", c)
	}
}

// Connect timeout precedence (Consul's): the upstream's own
// connect_timeout_ms, else the caller's UpstreamConfig, else the
// resolver's ConnectTimeout, else 5 s.
func TestUpstreamConnectTimeoutPrecedence(t *testing.T) {
	web := sdEntry("web")
	web.UpstreamConfig = &consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{{Name: "api", ConnectTimeoutMs: 400}}}
	res := &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api", ConnectTimeout: 3 * time.Second}
	for _, tc := range []struct {
		name    string
		entries []configentry.Entry
		cfg     map[string]any
		want    time.Duration
	}{
		{"nothing", nil, nil, 5 * time.Second},
		{"resolver", []configentry.Entry{res}, nil, 3 * time.Second},
		{"upstream config beats resolver", []configentry.Entry{res, web}, nil, 400 * time.Millisecond},
		{"proxy config beats both", []configentry.Entry{res, web}, map[string]any{"connect_timeout_ms": 900}, 900 * time.Millisecond},
	} {
		b := entriesBuilder(t, tc.entries...)
		out, err := b.proxy(testProxy("p1", "web", 21000, nil, catalog.Upstream{DestinationName: "api", LocalBindPort: 9191, Config: tc.cfg}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		validateAll(t, out)
		if got := clusterByName(out, ClusterName("api", "dc1", testTD)).GetConnectTimeout().AsDuration(); got != tc.want {
			t.Errorf("%s: connect timeout = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// UpstreamConfig applies to every target cluster of a routed upstream.
func TestUpstreamConfigOnEveryTarget(t *testing.T) {
	entries := canaryEntries(90, 10)
	a := sdEntry("service-a")
	a.UpstreamConfig = &consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{{
		Name: "service-b", PassiveHealthCheck: &consul.PassiveHealthCheck{MaxFailures: 2}}}}
	b := entriesBuilder(t, append(entries, a)...)
	res, err := b.proxy(testProxy("a1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	n := 0
	for _, c := range res.clusters {
		if c.GetName() == LocalAppCluster {
			continue
		}
		n++
		if c.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 2 {
			t.Errorf("cluster %s outlier detection = %v", c.GetName(), c.GetOutlierDetection())
		}
	}
	if n != 2 {
		t.Errorf("%d target clusters, want 2 (v1, v2)", n)
	}
}

// Local timeouts: LocalConnectTimeoutMs sets local_app's connect timeout
// unless the proxy config sets local_connect_timeout_ms;
// LocalRequestTimeoutMs sets the public HTTP route's timeout.
func TestLocalTimeouts(t *testing.T) {
	web := sdEntry("web")
	web.Protocol = "http"
	web.LocalConnectTimeoutMs = 250
	web.LocalRequestTimeoutMs = 2500
	b := entriesBuilder(t, web)
	res, err := b.proxy(testProxy("p1", "web", 21000, nil))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	if got := clusterByName(res, LocalAppCluster).GetConnectTimeout().AsDuration(); got != 250*time.Millisecond {
		t.Errorf("local_app connect timeout = %v, want 250ms", got)
	}
	rt := hcmOf(t, res.listeners[0]).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if rt.GetTimeout().AsDuration() != 2500*time.Millisecond {
		t.Errorf("public route timeout = %v, want 2.5s", rt.GetTimeout())
	}
	res, err = b.proxy(testProxy("p1", "web", 21000, map[string]any{"local_connect_timeout_ms": 900, "local_request_timeout_ms": 0}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	if got := clusterByName(res, LocalAppCluster).GetConnectTimeout().AsDuration(); got != 900*time.Millisecond {
		t.Errorf("proxy config: local_app connect timeout = %v, want 900ms", got)
	}
	rt = hcmOf(t, res.listeners[0]).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if rt.GetTimeout() == nil || rt.GetTimeout().AsDuration() != 0 {
		t.Errorf("local_request_timeout_ms 0: route timeout = %v, want 0 (disabled)", rt.GetTimeout())
	}
	// No entry: Envoy's default route timeout, 5 s local connect timeout.
	res, err = entriesBuilder(t).proxy(testProxy("p1", "web", 21000, map[string]any{"protocol": "http"}))
	if err != nil {
		t.Fatal(err)
	}
	if rt := hcmOf(t, res.listeners[0]).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute(); rt.GetTimeout() != nil {
		t.Errorf("no entry: route timeout = %v, want unset", rt.GetTimeout())
	}
	if got := clusterByName(res, LocalAppCluster).GetConnectTimeout().AsDuration(); got != 5*time.Second {
		t.Errorf("no entry: local_app connect timeout = %v", got)
	}
	if _, err := b.proxy(testProxy("p1", "web", 21000, map[string]any{"local_request_timeout_ms": "soon"})); !errors.Is(err, ErrInvalidProxyConfig) {
		t.Errorf("bad local_request_timeout_ms: err = %v", err)
	}
}

// Over a real ADS stream: writing the caller's service-defaults re-pushes
// its upstream cluster with circuit breakers and outlier detection, and
// removing it takes them away again.
func TestADSUpstreamConfigFollowsRegistry(t *testing.T) {
	reg := configentry.NewRegistry()
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) { c.ConfigEntries = reg })
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.waitProxy(webProxy, 21000)
	c := e.dial(webProxy, false)
	dbCluster := ClusterName("db", "dc1", e.ca.td)
	c.req(clusterType, nil, "", "", "")
	cds := c.next(clusterType)
	if db := decode(t, cds)[dbCluster].(*cluster.Cluster); db.GetCircuitBreakers() != nil || db.GetOutlierDetection() != nil {
		t.Fatalf("before the entry: %v", db)
	}
	c.ack(cds)

	web := sdEntry("web")
	web.UpstreamConfig = &consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{{Name: "db",
		Limits: &consul.UpstreamLimits{MaxConnections: intp(3)}, PassiveHealthCheck: &consul.PassiveHealthCheck{MaxFailures: 4}}}}
	reg.Replace(configentry.NewSet(web), 1)
	cds = c.next(clusterType)
	db := decode(t, cds)[dbCluster].(*cluster.Cluster)
	if db.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != 3 || db.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 4 {
		t.Fatalf("after the entry: %v", db)
	}
	c.ack(cds)

	reg.Replace(configentry.NewSet(), 2)
	cds = c.next(clusterType)
	if db := decode(t, cds)[dbCluster].(*cluster.Cluster); db.GetCircuitBreakers() != nil || db.GetOutlierDetection() != nil {
		t.Fatalf("after removal: %v", db)
	}
	c.ack(cds)
}

// UpstreamConfig.Protocol is the upstream's protocol unless its own config
// names one: http gives the inline-route HTTP upstream listener.
func TestUpstreamConfigProtocol(t *testing.T) {
	web := sdEntry("web")
	web.UpstreamConfig = &consul.UpstreamConfiguration{Defaults: &consul.UpstreamConfig{Protocol: "http"}}
	b := entriesBuilder(t, web)
	res, err := b.proxy(testProxy("p1", "web", 21000, nil,
		catalog.Upstream{DestinationName: "api", LocalBindPort: 9191},
		catalog.Upstream{DestinationName: "db", LocalBindPort: 9192, Config: map[string]any{"protocol": "tcp"}}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	for _, l := range res.listeners[1:] {
		fs := l.GetFilterChains()[0].GetFilters()
		want := hcmFilter
		if l.GetName() == "db:127.0.0.1:9192" {
			want = tcpProxyFilter
		}
		if fs[len(fs)-1].GetName() != want {
			t.Errorf("%s: filter %s, want %s", l.GetName(), fs[len(fs)-1].GetName(), want)
		}
	}
}
