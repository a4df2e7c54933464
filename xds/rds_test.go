package xds

import (
	"errors"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/testutil"
)

// splitterCompile is a small stand-in for Set.Compile (the placeholder
// configentry only compiles default chains): a service with a resolver
// and a splitter in the set gets an http chain with one catch-all route
// splitting over the resolver's subsets; anything else the default chain.
func splitterCompile(set *configentry.Set, service, dc string) (*configentry.Chain, error) {
	res, _ := set.Get(configentry.ServiceResolver, service).(*consul.ServiceResolverConfigEntry)
	spl, _ := set.Get(configentry.ServiceSplitter, service).(*consul.ServiceSplitterConfigEntry)
	if res == nil || spl == nil {
		return defaultChain(service, dc), nil
	}
	ch := &configentry.Chain{Service: service, Datacenter: dc, Protocol: "http", Targets: map[string]*configentry.Target{}}
	r := &configentry.Route{}
	for _, s := range spl.Splits {
		if s.Weight == 0 {
			continue
		}
		id := s.ServiceSubset + "." + service + ".default.default." + dc
		ch.Targets[id] = &configentry.Target{ID: id, Service: service, Subset: s.ServiceSubset, Datacenter: dc,
			Filter: res.Subsets[s.ServiceSubset].Filter, ConnectTimeout: configentry.DefaultConnectTimeout}
		r.Splits = append(r.Splits, configentry.Split{Weight: s.Weight, TargetID: id})
	}
	ch.Routes = []*configentry.Route{r}
	return ch, nil
}

func canarySet(v1, v2 float32) *configentry.Set {
	return configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "http"},
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db", Subsets: map[string]consul.ServiceResolverSubset{
			"v1": {Filter: "Service.Meta.version == v1"}, "v2": {Filter: "Service.Meta.version == v2"},
		}},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "db", Splits: []consul.ServiceSplit{
			{Weight: v1, ServiceSubset: "v1"}, {Weight: v2, ServiceSubset: "v2"},
		}},
	)
}

func (e *testEnv) versioned(id, svc, addr, version string) {
	inst := testProxy(id, svc, 21001, nil)
	inst.Address, inst.Meta = addr, map[string]string{"version": version}
	e.cat.Register(inst)
}

// The canary walkthrough over a real ADS stream: a Registry change turns
// the db upstream from tcp_proxy into RDS with a 90/10 split, then moves
// the split to 0/100 with one RDS push (the listener is not touched, so
// no connection is drained); subset endpoints follow the catalog.
func TestADSRoutesFollowRegistry(t *testing.T) {
	reg := configentry.NewRegistry()
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) {
		c.ConfigEntries, c.compile, c.matchFilter = reg, splitterCompile, metaFilter
	})
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.versioned("db-1-sidecar-proxy", "db", "10.1.0.2", "v1")
	e.versioned("db-2-sidecar-proxy", "db", "10.1.0.3", "v2")
	e.waitProxy(webProxy, 21000)
	c := e.dial(webProxy, false)
	dbCluster := ClusterName("db", "dc1", e.ca.td)
	v1, v2 := "v1."+dbCluster, "v2."+dbCluster

	c.req(clusterType, nil, "", "", "")
	cds := c.next(clusterType)
	wantNames(t, "clusters", asAny(decode(t, cds)), dbCluster, LocalAppCluster)
	c.ack(cds)
	c.req(listenerType, nil, "", "", "")
	lds := c.next(listenerType)
	if fs := decode(t, lds)["db:127.0.0.1:9191"].(*listener.Listener).GetFilterChains()[0].GetFilters(); fs[0].GetName() != tcpProxyFilter {
		t.Fatalf("default chain: db listener filters = %v, want tcp_proxy", fs)
	}
	c.ack(lds)

	reg.Replace(canarySet(90, 10), 1)
	// Make before break: the subset clusters come before the listener
	// that uses them, the old cluster goes after it.
	cds2 := c.next(clusterType)
	wantNames(t, "clusters added for the split", asAny(decode(t, cds2)), dbCluster, LocalAppCluster, v1, v2)
	c.ack(cds2)
	lds2 := c.next(listenerType)
	l := decode(t, lds2)["db:127.0.0.1:9191"].(*listener.Listener)
	m := unpack(t, l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &hcm.HttpConnectionManager{})
	if m.GetRds().GetRouteConfigName() != "db" {
		t.Fatalf("db listener route specifier = %v, want RDS db", m.GetRouteSpecifier())
	}
	c.ack(lds2)
	cds2 = c.next(clusterType)
	wantNames(t, "clusters after the split", asAny(decode(t, cds2)), LocalAppCluster, v1, v2)
	c.ack(cds2)
	c.req(routeType, []string{"db"}, "", "", "")
	rds := c.next(routeType)
	wc := decode(t, rds)["db"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetName() != v1 || wc[0].GetWeight().GetValue() != 9000 || wc[1].GetName() != v2 || wc[1].GetWeight().GetValue() != 1000 {
		t.Fatalf("weighted clusters = %v", wc)
	}
	c.ack(rds)
	c.req(endpointType, []string{v1, v2}, "", "", "")
	edsResp := c.next(endpointType)
	c.ack(edsResp)
	eds := asAny(decode(t, edsResp))
	if got := endpointsOf(t, eds, v1); len(got) != 1 || got[0] != "10.1.0.2" {
		t.Errorf("v1 endpoints = %v", got)
	}
	if got := endpointsOf(t, eds, v2); len(got) != 1 || got[0] != "10.1.0.3" {
		t.Errorf("v2 endpoints = %v", got)
	}
	if e.srv.cache.get(endpointType, "", dbCluster) != nil {
		t.Error("the whole-service CLA is still served with no proxy using it")
	}

	// Promotion: one RDS push, a newer version, no listener push.
	reg.Replace(canarySet(0, 100), 2)
	rds2 := c.next(routeType)
	if parseVersion(rds2.GetVersionInfo()) <= parseVersion(rds.GetVersionInfo()) {
		t.Errorf("RDS version did not increase: %s -> %s", rds.GetVersionInfo(), rds2.GetVersionInfo())
	}
	r := decode(t, rds2)["db"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if r.GetCluster() != v2 {
		t.Fatalf("route after promotion = %v, want all to %s", r, v2)
	}
	c.ack(rds2)
	if n := c.count(listenerType, 50*time.Millisecond); n != 0 {
		t.Errorf("a split change re-sent LDS %d times", n)
	}
	cds3 := c.next(clusterType)
	wantNames(t, "clusters after promotion", asAny(decode(t, cds3)), LocalAppCluster, v2)
	c.ack(cds3)

	// A new v2 instance: EDS of v2 follows the catalog.
	e.versioned("db-3-sidecar-proxy", "db", "10.1.0.4", "v2")
	for {
		resp := c.next(endpointType)
		c.ack(resp)
		eds := asAny(decode(t, resp))
		if _, ok := eds[v2]; ok {
			if got := endpointsOf(t, eds, v2); len(got) != 2 {
				t.Fatalf("v2 endpoints = %v, want 2", got)
			}
			break
		}
	}

	// Entries removed: back to the default chain's tcp_proxy, routes gone.
	reg.Replace(configentry.NewSet(), 3)
	lds3 := c.next(listenerType)
	if fs := decode(t, lds3)["db:127.0.0.1:9191"].(*listener.Listener).GetFilterChains()[0].GetFilters(); fs[0].GetName() != tcpProxyFilter {
		t.Fatalf("after removal: db listener filters = %v", fs)
	}
	waitGone(t, e, routeType, webProxy, "db")
}

func waitGone(t *testing.T, e *testEnv, typeURL, node, name string) {
	t.Helper()
	testutil.WaitFor(t, hangGuard, typeLabel(typeURL)+" "+name+" withdrawn", func() bool { return e.srv.cache.get(typeURL, node, name) == nil })
}

// The same walkthrough on a delta stream, through the real Set.Compile:
// it only routes once the real configentry is merged.
func TestADSDeltaRoutesWithRealCompile(t *testing.T) {
	set := canarySet(90, 10)
	if ch, err := set.Compile("db", "dc1"); err != nil || ch.Default {
		t.Skip("configentry.Set.Compile is still the placeholder (a default chain for a service with a splitter); un-skip once the real configentry is merged")
	}
	deltaRoutes(t, set, func(*Config) {})
}

// The delta walkthrough with the stand-in compiler and filter.
func TestADSDeltaRoutes(t *testing.T) {
	deltaRoutes(t, canarySet(90, 10), func(c *Config) { c.compile, c.matchFilter = splitterCompile, metaFilter })
}

func deltaRoutes(t *testing.T, set *configentry.Set, edit func(*Config)) {
	reg := configentry.NewRegistry()
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) { c.ConfigEntries = reg; edit(c) })
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.versioned("db-1-sidecar-proxy", "db", "10.1.0.2", "v1")
	e.versioned("db-2-sidecar-proxy", "db", "10.1.0.3", "v2")
	e.waitProxy(webProxy, 21000)
	reg.Replace(set, 1)
	c := e.dial(webProxy, true)
	dbCluster := ClusterName("db", "dc1", e.ca.td)
	v1, v2 := "v1."+dbCluster, "v2."+dbCluster
	c.dreq(clusterType, nil, nil, "", "")
	var cds map[string]any
	for {
		resp := c.dnext(clusterType)
		c.ack(resp)
		cds = asAny(decode(t, resp))
		if cds[v1] != nil {
			break
		}
	}
	if _, ok := cds[v1].(*cluster.Cluster); !ok || cds[v2] == nil {
		t.Fatalf("clusters = %v", keys(cds))
	}
	c.dreq(routeType, []string{"db"}, nil, "", "")
	rds := c.dnext(routeType)
	c.ack(rds)
	wc := decode(t, rds)["db"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetWeight().GetValue()+wc[1].GetWeight().GetValue() != 10000 {
		t.Fatalf("weighted clusters = %v", wc)
	}
	c.dreq(endpointType, []string{v1, v2}, nil, "", "")
	seen := map[string][]string{}
	for len(seen) < 2 {
		resp := c.dnext(endpointType)
		c.ack(resp)
		eds := asAny(decode(t, resp))
		for _, n := range []string{v1, v2} {
			if eds[n] != nil {
				seen[n] = endpointsOf(t, eds, n)
			}
		}
	}
	if len(seen[v1]) != 1 || seen[v1][0] != "10.1.0.2" || len(seen[v2]) != 1 || seen[v2][0] != "10.1.0.3" {
		t.Errorf("subset endpoints = %v", seen)
	}
	reg.Replace(canarySet(0, 100), 2)
	rds2 := c.dnext(routeType)
	if r := decode(t, rds2)["db"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute(); r.GetCluster() != v2 {
		t.Errorf("route after promotion = %v", r)
	}
}

// A chain that cannot be translated holds the proxy at its last good
// resources with the error in ProxyError; fixing the entries clears it.
func TestChainErrorClearsWhenEntriesChange(t *testing.T) {
	reg := configentry.NewRegistry()
	broken := func(set *configentry.Set, service, dc string) (*configentry.Chain, error) {
		ch, err := splitterCompile(set, service, dc)
		if err == nil && set.Get(configentry.ServiceDefaults, "broken") != nil {
			ch.Routes[0].Splits[0].TargetID = "nowhere"
		}
		return ch, err
	}
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) {
		c.ConfigEntries, c.compile, c.matchFilter = reg, broken, metaFilter
	})
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.waitProxy(webProxy, 21000)
	reg.Replace(canarySet(90, 10).With(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "broken"}), 1)
	testutil.WaitFor(t, hangGuard, "chain error reported", func() bool { return errors.Is(e.srv.ProxyError(webProxy), ErrInvalidChain) })
	if e.srv.cache.get(listenerType, webProxy, PublicListenerName(21000)) == nil {
		t.Fatal("the proxy lost its last good listeners")
	}
	reg.Replace(canarySet(90, 10), 2)
	testutil.WaitFor(t, hangGuard, "chain error cleared", func() bool { return e.srv.ProxyError(webProxy) == nil })
	testutil.WaitFor(t, hangGuard, "routes served", func() bool { return e.srv.cache.get(routeType, webProxy, "db") != nil })
}

// A target failing over to another service: that service's catalog
// changes rebuild the target's endpoints (priority 1), empty priority 0
// kept so Envoy fails over.
func TestFailoverEndpointsFollowCatalog(t *testing.T) {
	reg := configentry.NewRegistry()
	failover := func(set *configentry.Set, service, dc string) (*configentry.Chain, error) {
		ch := defaultChain(service, dc)
		if service == "db" {
			ch.Default = false
			id := "db.default.default." + dc
			ch.Targets[id].Failover = []string{"db-backup.default.default." + dc}
			ch.Targets["db-backup.default.default."+dc] = &configentry.Target{ID: "db-backup.default.default." + dc, Service: "db-backup", Datacenter: dc}
		}
		return ch, nil
	}
	e := newEnvConfig(t, hclog.Warn, 2*time.Millisecond, func(c *Config) {
		c.ConfigEntries, c.compile, c.matchFilter = reg, failover, metaFilter
	})
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.waitProxy(webProxy, 21000)
	dbCluster := ClusterName("db", "dc1", e.ca.td)
	c := e.dial(webProxy, true)
	c.dreq(endpointType, []string{dbCluster}, nil, "", "")
	first := c.dnext(endpointType)
	c.ack(first)
	cla := decode(t, first)[dbCluster].(*endpoint.ClusterLoadAssignment)
	if got := addrsByPriority(cla); len(got) != 2 || len(got[0]) != 0 || len(got[1]) != 0 {
		t.Fatalf("endpoints by priority = %v, want two empty priorities", got)
	}
	e.proxy("backup-1-sidecar-proxy", "db-backup", "10.1.0.9", 21001)
	next := c.dnext(endpointType)
	cla = decode(t, next)[dbCluster].(*endpoint.ClusterLoadAssignment)
	if got := addrsByPriority(cla); len(got) != 2 || len(got[0]) != 0 || len(got[1]) != 1 || got[1][0] != "10.1.0.9" {
		t.Fatalf("endpoints by priority = %v, want the backup at priority 1", got)
	}
}
