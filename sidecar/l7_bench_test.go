package sidecar

import (
	"io"
	"net/http"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// benchL7 runs keep-alive GETs through web -> api over a two-backend mesh
// with rc as web's route configuration and reports the process's CPU per
// request (client, apps and both sidecars; only the routes differ between
// the benchmarks of this file).
func benchL7(b *testing.B, rc *routev3.RouteConfiguration) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"count":1}`) })
	m := newL7Mesh(b, []l7BackendSpec{{cluster: subsetCluster("v1"), handler: ok}, {cluster: subsetCluster("v2"), handler: ok}}, rc, l7Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: waitTimeout}
	defer client.CloseIdleConnections()
	url := m.url("/api/items?page=2")
	b.SetParallelism(4)
	before := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("X-User", "alice")
			resp, err := client.Do(req)
			if err != nil {
				b.Errorf("GET: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("GET: status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/req")
}

// BenchmarkPlain: one catch-all route to one cluster (plain forwarding).
func BenchmarkPlain(b *testing.B) {
	benchL7(b, apiRoutes(clusterRoute("/", subsetCluster("v1"), nil)))
}

// BenchmarkRouted: a 5-route router (header, method, regex, query and
// path matches the request fails) then a 50/50 split between two subsets.
func BenchmarkRouted(b *testing.B) {
	v1, v2 := subsetCluster("v1"), subsetCluster("v2")
	rc := apiRoutes(
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch("x-canary", "exact", "1", false)}
		}),
		clusterRoute("/admin", v2, nil),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch(":method", "regex", "POST|PUT|DELETE", false)}
		}),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/api/v[0-9]+/.*"}}
		}),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.QueryParameters = []*routev3.QueryParameterMatcher{{Name: "beta",
				QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}}}
		}),
		splitRoute("/", v1, 5000, v2, 5000),
	)
	benchL7(b, rc)
}

// BenchmarkRouteMatch is the router's own cost per request: matching the
// 5-route configuration of BenchmarkRouted and picking the split.
func BenchmarkRouteMatch(b *testing.B) {
	v1, v2 := subsetCluster("v1"), subsetCluster("v2")
	rc, err := decodeRouteConfig(apiRoutes(
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch("x-canary", "exact", "1", false)}
		}),
		clusterRoute("/admin", v2, nil),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch(":method", "regex", "POST|PUT|DELETE", false)}
		}),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/api/v[0-9]+/.*"}}
		}),
		clusterRoute("/", v2, func(r *routev3.Route) {
			r.Match.QueryParameters = []*routev3.QueryParameterMatcher{{Name: "beta",
				QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}}}
		}),
		splitRoute("/", v1, 5000, v2, 5000),
	))
	if err != nil {
		b.Fatal(err)
	}
	req := testRequest("GET", "/api/items?page=2", "127.0.0.1:9000", "X-User", "alice")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rt := rc.match(&reqView{req: req, scheme: "http"})
		if rt == nil || pickWeighted(rt.clusters) == "" {
			b.Fatal("no route")
		}
	}
}
