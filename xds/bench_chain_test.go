package xds

import (
	"fmt"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

const routeBenchServices = 1000

// routerChain is a chain like a 5-route router over a 2-way splitter and
// a 2-subset resolver would compile to.
func routerChain(service, dc string) *configentry.Chain {
	id := func(subset string) string { return subset + "." + service + ".default.default." + dc }
	ch := &configentry.Chain{Service: service, Datacenter: dc, Protocol: "http", Targets: map[string]*configentry.Target{}}
	for _, s := range []string{"v1", "v2"} {
		ch.Targets[id(s)] = &configentry.Target{ID: id(s), Service: service, Subset: s, Datacenter: dc,
			Filter: "Service.Meta.version == " + s, ConnectTimeout: configentry.DefaultConnectTimeout}
	}
	split := []configentry.Split{{Weight: 90, TargetID: id("v1")}, {Weight: 10, TargetID: id("v2")}}
	ch.Routes = []*configentry.Route{
		{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/admin"}, Splits: to(id("v2"))},
		{Match: &consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}, Splits: to(id("v2"))},
		{Match: &consul.ServiceRouteHTTPMatch{PathExact: "/health", Methods: []string{"GET", "HEAD"}}, Splits: to(id("v1")), RequestTimeout: time.Second},
		{Match: &consul.ServiceRouteHTTPMatch{PathRegex: "/api/v[0-9]+/.*"}, Splits: split, PrefixRewrite: "/", NumRetries: 2, RetryOnConnectFailure: true},
		{Splits: split, NumRetries: 3, RetryOnStatusCodes: []uint32{503}},
	}
	return ch
}

// routerEntries are 1,000 services' router, splitter, resolver and
// service-defaults, for the real compiler.
func routerEntries(n int) *configentry.Set {
	var es []configentry.Entry
	for i := 0; i < n; i++ {
		svc := fmt.Sprintf("svc-%04d", i)
		es = append(es, canaryEntries(90, 10)...)
		for _, e := range es[len(es)-4:] {
			switch v := e.(type) {
			case *consul.ServiceConfigEntry:
				v.Name = svc
			case *consul.ServiceResolverConfigEntry:
				v.Name = svc
			case *consul.ServiceSplitterConfigEntry:
				v.Name = svc
			case *consul.ServiceRouterConfigEntry:
				v.Name = svc
				v.Routes[2].Destination.Service = svc
			}
		}
	}
	return configentry.NewSet(es...)
}

func benchProxyWith(n int) catalog.ServiceInstance {
	ups := make([]catalog.Upstream, n)
	for i := range ups {
		ups[i] = catalog.Upstream{DestinationName: fmt.Sprintf("svc-%04d", i), LocalBindPort: 10000 + i}
	}
	return testProxy("bench", "client", 21000, nil, ups...)
}

// BenchmarkCompileRoutes1000 is the xDS build of one proxy with 1,000
// HTTP upstreams whose services have a 5-route router, a 2-way split and
// two subsets: compile + translation time per build, and the size of what
// is served (listeners, clusters, route configurations, marshalled).
func BenchmarkCompileRoutes1000(b *testing.B) {
	run := func(b *testing.B, bl builder) {
		inst := benchProxyWith(routeBenchServices)
		res, err := bl.proxy(inst)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.routes) != routeBenchServices || len(res.clusters) != 2*routeBenchServices+1 {
			b.Fatalf("built %d routes and %d clusters", len(res.routes), len(res.clusters))
		}
		size := 0
		for _, m := range append(append(msgs(res.listeners), msgs(res.clusters)...), msgs(res.routes)...) {
			size += proto.Size(m)
		}
		routeSize := 0
		for _, r := range res.routes {
			routeSize += proto.Size(r)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := bl.proxy(inst); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(size), "bytes/proxy")
		b.ReportMetric(float64(routeSize)/routeBenchServices, "route-bytes/service")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/routeBenchServices, "µs/service")
	}
	b.Run("hand-built-chains", func(b *testing.B) {
		bl := testBuilder
		bl.compile = func(_ *configentry.Set, svc, dc string) (*configentry.Chain, error) { return routerChain(svc, dc), nil }
		run(b, bl)
	})
	b.Run("real-compile", func(b *testing.B) {
		set := routerEntries(routeBenchServices)
		if ch, err := set.Compile("svc-0000", "dc1"); err != nil || ch.Default {
			b.Skip("configentry.Set.Compile is still the placeholder; un-skip once the real configentry is merged")
		}
		run(b, builder{dc: "dc1", trustDomain: testTD, set: set})
	})
}
