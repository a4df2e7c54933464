package xds

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

var testBuilder = builder{dc: "dc1", trustDomain: testTD}

// chainBuilder is a builder whose every chain is compiled by fn.
func chainBuilder(fn func(service, dc string) *configentry.Chain) builder {
	b := testBuilder
	b.compile = func(_ *configentry.Set, service, dc string) (*configentry.Chain, error) { return fn(service, dc), nil }
	return b
}

func defaultChain(service, dc string) *configentry.Chain {
	id := service + ".default.default." + dc
	return &configentry.Chain{
		Service: service, Datacenter: dc, Protocol: "tcp", Default: true,
		Routes:  []*configentry.Route{{Splits: to(id)}},
		Targets: map[string]*configentry.Target{id: {ID: id, Service: service, Datacenter: dc, ConnectTimeout: configentry.DefaultConnectTimeout}},
	}
}

// validateAll runs Envoy's validation (inside Anys too) on every resource.
func validateAll(t *testing.T, res *proxyResources) {
	t.Helper()
	for _, m := range append(append(msgs(res.listeners), msgs(res.clusters)...), msgs(res.routes)...) {
		if err := envoyvalidate.All(m); err != nil {
			t.Errorf("%s fails validation: %v", proto.MessageName(m), err)
		}
	}
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Errorf("inconsistent: %v", err)
	}
}

func clusterByName(res *proxyResources, name string) *cluster.Cluster {
	for _, c := range res.clusters {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

func hcmOf(t *testing.T, l *listener.Listener) *hcm.HttpConnectionManager {
	t.Helper()
	fs := l.GetFilterChains()[0].GetFilters()
	return unpack(t, fs[len(fs)-1].GetTypedConfig(), &hcm.HttpConnectionManager{})
}

// A default chain builds exactly the resources of the code before config
// entries: inline routes for http, tcp_proxy for tcp, one cluster.
func TestDefaultChainKeepsPreL7Resources(t *testing.T) {
	for _, prot := range []protocol{protoTCP, protoHTTP, protoGRPC} {
		t.Run(string(prot), func(t *testing.T) {
			inst := testProxy("p1", "web", 21000, nil, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191, Config: map[string]any{"protocol": string(prot)}})
			for name, b := range map[string]builder{"nil set": testBuilder, "hand-built default chain": chainBuilder(defaultChain),
				"empty registry set": {dc: "dc1", trustDomain: testTD, set: configentry.NewSet()}} {
				res, err := b.proxy(inst)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				cl := ClusterName("db", "dc1", testTD)
				wantC, _ := upstreamCluster(cl, "web", SpiffeID(testTD, "dc1", "db"), defaultConnectTimeout, prot)
				wantL, _ := upstreamListener("db", "127.0.0.1", 9191, cl, prot)
				if !proto.Equal(clusterByName(res, cl), wantC) {
					t.Errorf("%s: cluster = %v", name, protojson.Format(clusterByName(res, cl)))
				}
				if !proto.Equal(res.listeners[1], wantL) {
					t.Errorf("%s: listener = %v", name, protojson.Format(res.listeners[1]))
				}
				if len(res.routes) != 0 || len(res.upstreams) != 1 || res.upstreams[0] != (claKey{service: "db", dc: "dc1"}) || !res.specs[res.upstreams[0]].plain() {
					t.Errorf("%s: routes %v, upstreams %v, specs %v", name, res.routes, res.upstreams, res.specs)
				}
				validateAll(t, res)
			}
		})
	}
}

func TestHTTPChainUsesRDS(t *testing.T) {
	b := chainBuilder(func(service, dc string) *configentry.Chain {
		if service != "service-b" {
			return defaultChain(service, dc)
		}
		return canaryChain(
			&configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/admin"}, Splits: to(tgtV2)},
			&configentry.Route{Splits: []configentry.Split{{Weight: 90, TargetID: tgtV1}, {Weight: 10, TargetID: tgtV2}}},
		)
	})
	inst := testProxy("p1", "service-a", 21000, nil,
		catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191},
		catalog.Upstream{DestinationName: "db", LocalBindPort: 9192})
	res, err := b.proxy(inst)
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	m := hcmOf(t, res.listeners[1])
	if m.GetRds().GetRouteConfigName() != "service-b" || m.GetRds().GetConfigSource().GetAds() == nil {
		t.Fatalf("upstream HCM route specifier = %v, want RDS service-b over ADS", m.GetRouteSpecifier())
	}
	if n := len(m.GetHttpFilters()); n != 1 || m.GetHttpFilters()[0].GetName() != routerFilter {
		t.Errorf("upstream http filters = %v", m.GetHttpFilters())
	}
	if len(res.routes) != 1 || res.routes[0].GetName() != "service-b" {
		t.Fatalf("routes = %v", res.routes)
	}
	var names []string
	for _, c := range res.clusters {
		names = append(names, c.GetName())
	}
	sort.Strings(names)
	want := []string{ClusterName("db", "dc1", testTD), LocalAppCluster, clV1, clV2}
	sort.Strings(want)
	if len(names) != len(want) {
		t.Fatalf("clusters = %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("clusters = %v, want %v", names, want)
		}
	}
	// Subset clusters verify service-b's identity and read their own CLA.
	for _, n := range []string{clV1, clV2} {
		c := clusterByName(res, n)
		utc := unpack(t, c.GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
		sans := utc.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
		if utc.GetSni() != n || len(sans) != 1 || sans[0].GetMatcher().GetExact() != SpiffeID(testTD, "dc1", "service-b") {
			t.Errorf("cluster %s: sni %q sans %v", n, utc.GetSni(), sans)
		}
		if c.GetType() != cluster.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != "" {
			t.Errorf("cluster %s is not EDS under its own name", n)
		}
	}
	keys := map[claKey]bool{}
	for _, k := range res.upstreams {
		keys[k] = true
	}
	v2 := claKey{service: "service-b", dc: "dc1", subset: "v2"}
	if !keys[v2] || !keys[claKey{service: "service-b", dc: "dc1", subset: "v1"}] || !keys[claKey{service: "db", dc: "dc1"}] || len(keys) != 3 {
		t.Errorf("upstream CLAs = %v", res.upstreams)
	}
	if s := res.specs[v2]; len(s.sources) != 1 || s.sources[0].filter != "Service.Meta.version == v2" {
		t.Errorf("v2 spec = %+v", s)
	}
}

func TestChainProtocolDecidesHTTP2(t *testing.T) {
	for _, tc := range []struct {
		chainProt string
		http2     bool
	}{{"http", false}, {"http2", true}, {"grpc", true}} {
		b := chainBuilder(func(service, dc string) *configentry.Chain {
			ch := canaryChain(&configentry.Route{Splits: to(tgtB)})
			ch.Protocol = tc.chainProt
			return ch
		})
		res, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
		if err != nil {
			t.Fatal(err)
		}
		validateAll(t, res)
		c := clusterByName(res, clB)
		if got := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsID] != nil; got != tc.http2 {
			t.Errorf("%s: http2 options = %v, want %v", tc.chainProt, got, tc.http2)
		}
		if len(res.routes) != 1 {
			t.Errorf("%s: no RDS", tc.chainProt)
		}
	}
}

func TestTCPChainToSubset(t *testing.T) {
	// A resolver with a default subset on a tcp service: tcp_proxy to the
	// subset's cluster, no routes.
	b := chainBuilder(func(service, dc string) *configentry.Chain {
		ch := canaryChain(&configentry.Route{Splits: to(tgtV1)})
		ch.Protocol = "tcp"
		ch.Routes = ch.Routes[:1]
		return ch
	})
	res, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	want, _ := upstreamListener("service-b", "127.0.0.1", 9191, clV1, protoTCP)
	if !proto.Equal(res.listeners[1], want) || len(res.routes) != 0 {
		t.Errorf("listener = %v routes = %v", res.listeners[1], res.routes)
	}
	// A tcp chain cannot route.
	b = chainBuilder(func(service, dc string) *configentry.Chain {
		ch := canaryChain(&configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/x"}, Splits: to(tgtV2)})
		ch.Protocol = "tcp"
		return ch
	})
	if _, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191})); !errors.Is(err, ErrInvalidChain) {
		t.Errorf("err = %v, want ErrInvalidChain", err)
	}
}

func TestTargetClusters(t *testing.T) {
	cases := []struct {
		name  string
		lb    *consul.LoadBalancer
		check func(t *testing.T, c *cluster.Cluster)
	}{
		{"default", nil, func(t *testing.T, c *cluster.Cluster) {
			if c.GetLbPolicy() != cluster.Cluster_ROUND_ROBIN || c.GetLbConfig() != nil {
				t.Errorf("lb = %v %v", c.GetLbPolicy(), c.GetLbConfig())
			}
		}},
		{"least_request", &consul.LoadBalancer{Policy: "least_request", LeastRequestConfig: &consul.LeastRequestConfig{ChoiceCount: 3}}, func(t *testing.T, c *cluster.Cluster) {
			if c.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST || c.GetLeastRequestLbConfig().GetChoiceCount().GetValue() != 3 {
				t.Errorf("lb = %v %v", c.GetLbPolicy(), c.GetLbConfig())
			}
		}},
		{"least_request, one choice (Envoy wants 2+)", &consul.LoadBalancer{Policy: "least_request", LeastRequestConfig: &consul.LeastRequestConfig{ChoiceCount: 1}}, func(t *testing.T, c *cluster.Cluster) {
			if c.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST || c.GetLbConfig() != nil {
				t.Errorf("lb = %v %v", c.GetLbPolicy(), c.GetLbConfig())
			}
		}},
		{"random", &consul.LoadBalancer{Policy: "random"}, func(t *testing.T, c *cluster.Cluster) {
			if c.GetLbPolicy() != cluster.Cluster_RANDOM {
				t.Errorf("lb = %v", c.GetLbPolicy())
			}
		}},
		{"ring_hash", &consul.LoadBalancer{Policy: "ring_hash", RingHashConfig: &consul.RingHashConfig{MinimumRingSize: 1024, MaximumRingSize: 8192}}, func(t *testing.T, c *cluster.Cluster) {
			rh := c.GetRingHashLbConfig()
			if c.GetLbPolicy() != cluster.Cluster_RING_HASH || rh.GetMinimumRingSize().GetValue() != 1024 || rh.GetMaximumRingSize().GetValue() != 8192 {
				t.Errorf("lb = %v %v", c.GetLbPolicy(), rh)
			}
		}},
		{"maglev", &consul.LoadBalancer{Policy: "maglev"}, func(t *testing.T, c *cluster.Cluster) {
			if c.GetLbPolicy() != cluster.Cluster_MAGLEV {
				t.Errorf("lb = %v", c.GetLbPolicy())
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := chainBuilder(func(service, dc string) *configentry.Chain {
				ch := canaryChain(&configentry.Route{Splits: to(tgtV1)})
				ch.Targets[tgtV1].LoadBalancer = tc.lb
				ch.Targets[tgtV1].ConnectTimeout = 1500 * time.Millisecond
				return ch
			})
			res, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
			if err != nil {
				t.Fatal(err)
			}
			validateAll(t, res)
			c := clusterByName(res, clV1)
			if c == nil {
				t.Fatalf("no cluster %s", clV1)
			}
			if c.GetConnectTimeout().AsDuration() != 1500*time.Millisecond {
				t.Errorf("connect timeout = %v", c.GetConnectTimeout().AsDuration())
			}
			tc.check(t, c)
		})
	}
	b := chainBuilder(func(service, dc string) *configentry.Chain {
		ch := canaryChain(&configentry.Route{Splits: to(tgtV1)})
		ch.Targets[tgtV1].LoadBalancer = &consul.LoadBalancer{Policy: "fastest"}
		return ch
	})
	if _, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191})); !errors.Is(err, ErrInvalidChain) {
		t.Errorf("unknown policy: err = %v, want ErrInvalidChain", err)
	}
}

func TestUpstreamTimeoutVersusResolver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resolver time.Duration
		cfg      map[string]any
		want     time.Duration
	}{
		{"resolver default, config set", configentry.DefaultConnectTimeout, map[string]any{"connect_timeout_ms": 750}, 750 * time.Millisecond},
		// Consul: the upstream's connect_timeout_ms overrides the resolver's
		// (discoverychain compile, OverrideConnectTimeout).
		{"config beats resolver", 2 * time.Second, map[string]any{"connect_timeout_ms": 750}, 750 * time.Millisecond},
		{"resolver set, config unset", 2 * time.Second, nil, 2 * time.Second},
		{"nothing set", configentry.DefaultConnectTimeout, nil, configentry.DefaultConnectTimeout},
	} {
		b := chainBuilder(func(service, dc string) *configentry.Chain {
			ch := canaryChain(&configentry.Route{Splits: to(tgtB)})
			ch.Targets[tgtB].ConnectTimeout = tc.resolver
			return ch
		})
		res, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191, Config: tc.cfg}))
		if err != nil {
			t.Fatal(err)
		}
		if got := clusterByName(res, clB).GetConnectTimeout().AsDuration(); got != tc.want {
			t.Errorf("%s: connect timeout = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFailoverTargets(t *testing.T) {
	const tgtC = "service-c.default.default.dc1"
	const tgtB2 = "service-b.default.default.dc2"
	b := chainBuilder(func(service, dc string) *configentry.Chain {
		ch := canaryChain(&configentry.Route{Splits: to(tgtB)})
		ch.Targets[tgtB].Failover = []string{tgtB2, tgtC}
		ch.Targets[tgtB2] = &configentry.Target{ID: tgtB2, Service: "service-b", Datacenter: "dc2"}
		ch.Targets[tgtC] = tgt(tgtC, "service-c", "", "")
		return ch
	})
	res, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	// Failover targets get no cluster of their own: they are priorities
	// of the primary's endpoints, whose cluster accepts their identities.
	if clusterByName(res, ClusterName("service-c", "dc1", testTD)) != nil || len(res.clusters) != 2 {
		t.Errorf("clusters = %v", res.clusters)
	}
	utc := unpack(t, clusterByName(res, clB).GetTransportSocket().GetTypedConfig(), &tlsv3.UpstreamTlsContext{})
	var sans []string
	for _, m := range utc.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.GetMatcher().GetExact())
	}
	want := []string{SpiffeID(testTD, "dc1", "service-b"), SpiffeID(testTD, "dc2", "service-b"), SpiffeID(testTD, "dc1", "service-c")}
	if len(sans) != 3 || sans[0] != want[0] || sans[1] != want[1] || sans[2] != want[2] {
		t.Errorf("sans = %v, want %v", sans, want)
	}
	spec := res.specs[claKey{service: "service-b", dc: "dc1"}]
	if len(spec.sources) != 3 || spec.sources[1] != (endpointSource{service: "service-b", dc: "dc2"}) || spec.sources[2].service != "service-c" {
		t.Errorf("spec = %+v", spec)
	}
}

func TestServiceDefaultsProtocolOnPublicListener(t *testing.T) {
	// The real Set's Protocol: with the placeholder configentry it is
	// always tcp, so this checks the proxy config path and the ext_authz
	// HTTP filter; set.Protocol is exercised by TestPublicListenerProtocolFromEntries.
	for _, prot := range []string{"http", "http2", "grpc"} {
		res, err := testBuilder.proxy(testProxy("p1", "web", 21000, map[string]any{"protocol": prot}))
		if err != nil {
			t.Fatal(err)
		}
		validateAll(t, res)
		checkHTTPAuthz(t, res.listeners[0])
	}
	res, err := testBuilder.proxy(testProxy("p1", "web", 21000, nil))
	if err != nil {
		t.Fatal(err)
	}
	if fs := res.listeners[0].GetFilterChains()[0].GetFilters(); fs[len(fs)-1].GetName() != tcpProxyFilter {
		t.Errorf("tcp public listener filters = %v", fs)
	}
}

// Entry strings that Envoy would refuse fail the build with a clear error
// (and the proxy keeps its last good resources) instead of a NACK.
func TestInvalidRouteFailsBuild(t *testing.T) {
	b := chainBuilder(func(service, dc string) *configentry.Chain {
		return canaryChain(&configentry.Route{Match: &consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{{Name: "", Exact: "x"}}}, Splits: to(tgtV2)})
	})
	_, err := b.proxy(testProxy("p1", "service-a", 21000, nil, catalog.Upstream{DestinationName: "service-b", LocalBindPort: 9191}))
	if !errors.Is(err, ErrInvalidChain) || !strings.Contains(err.Error(), "Name") {
		t.Fatalf("err = %v, want ErrInvalidChain naming the header", err)
	}
}
