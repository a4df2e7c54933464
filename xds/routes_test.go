package xds

import (
	"errors"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// Target IDs and cluster names of the canary walkthrough's service-b.
const (
	tgtB  = "service-b.default.default.dc1"
	tgtV1 = "v1.service-b.default.default.dc1"
	tgtV2 = "v2.service-b.default.default.dc1"
)

var (
	clB  = ClusterName("service-b", "dc1", testTD)
	clV1 = "v1." + ClusterName("service-b", "dc1", testTD)
	clV2 = "v2." + ClusterName("service-b", "dc1", testTD)
)

func tgt(id, svc, subset, filter string) *configentry.Target {
	return &configentry.Target{ID: id, Service: svc, Subset: subset, Datacenter: "dc1", Filter: filter, ConnectTimeout: configentry.DefaultConnectTimeout}
}

// canaryChain is service-b's chain with routes rs (a catch-all is added
// when the last one has a match) and the targets of the walkthrough.
func canaryChain(rs ...*configentry.Route) *configentry.Chain {
	if len(rs) == 0 || rs[len(rs)-1].Match != nil {
		rs = append(rs, &configentry.Route{Splits: []configentry.Split{{Weight: 100, TargetID: tgtV1}}})
	}
	return &configentry.Chain{
		Service: "service-b", Datacenter: "dc1", Protocol: "http", Routes: rs,
		Targets: map[string]*configentry.Target{
			tgtB:  tgt(tgtB, "service-b", "", ""),
			tgtV1: tgt(tgtV1, "service-b", "v1", "Service.Meta.version == v1"),
			tgtV2: tgt(tgtV2, "service-b", "v2", "Service.Meta.version == v2"),
		},
	}
}

func to(id string) []configentry.Split { return []configentry.Split{{Weight: 100, TargetID: id}} }

func toCluster(c string) *route.Route_Route {
	return &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: c}}}
}

func prefix(p string) *route.RouteMatch {
	return &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: p}}
}

func strMatch(m *matcher.StringMatcher) *route.HeaderMatcher_StringMatch {
	return &route.HeaderMatcher_StringMatch{StringMatch: m}
}

func regex(r string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: r}}}
}

// clusterNamer resolves target IDs the way upstreamChain does, without
// building clusters.
func clusterNamer(ch *configentry.Chain) func(string) (string, error) {
	return func(id string) (string, error) {
		t := ch.Targets[id]
		if t == nil {
			return "", ErrInvalidChain
		}
		return subsetClusterName(t.Subset, t.Service, t.Datacenter, testTD), nil
	}
}

func TestRouteTranslation(t *testing.T) {
	cases := []struct {
		name string
		in   *configentry.Route
		want *route.Route
	}{
		{"catch-all", &configentry.Route{Splits: to(tgtB)},
			&route.Route{Match: prefix("/"), Action: toCluster(clB)}},
		{"path prefix to subset", &configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/admin"}, Splits: to(tgtV2)},
			&route.Route{Match: prefix("/admin"), Action: toCluster(clV2)}},
		{"path exact", &configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathExact: "/health"}, Splits: to(tgtB)},
			&route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: "/health"}}, Action: toCluster(clB)}},
		{"path regex, case insensitive", &configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathRegex: "/v[0-9]+/.*", CaseInsensitive: true}, Splits: to(tgtB)},
			&route.Route{Match: &route.RouteMatch{
				PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "/v[0-9]+/.*"}},
				CaseSensitive: wrapperspb.Bool(false),
			}, Action: toCluster(clB)}},
		{"headers", &configentry.Route{Match: &consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{
			{Name: "x-canary", Exact: "1"},
			{Name: "x-pre", Prefix: "a"},
			{Name: "x-suf", Suffix: "z"},
			{Name: "x-re", Regex: "[0-9]+"},
			{Name: "x-present", Present: true},
			{Name: "x-not", Exact: "no", Invert: true},
		}}, Splits: to(tgtV2)},
			&route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}, Headers: []*route.HeaderMatcher{
				{Name: "x-canary", HeaderMatchSpecifier: strMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "1"}})},
				{Name: "x-pre", HeaderMatchSpecifier: strMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "a"}})},
				{Name: "x-suf", HeaderMatchSpecifier: strMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: "z"}})},
				{Name: "x-re", HeaderMatchSpecifier: strMatch(regex("[0-9]+"))},
				{Name: "x-present", HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}},
				{Name: "x-not", InvertMatch: true, HeaderMatchSpecifier: strMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "no"}})},
			}}, Action: toCluster(clV2)}},
		{"methods and query", &configentry.Route{Match: &consul.ServiceRouteHTTPMatch{
			PathPrefix: "/api", Methods: []string{"GET", "POST"},
			QueryParam: []consul.ServiceRouteHTTPMatchQueryParam{{Name: "debug", Present: true}, {Name: "v", Exact: "2"}, {Name: "id", Regex: "[a-f]+"}},
		}, Splits: to(tgtB)},
			&route.Route{Match: &route.RouteMatch{
				PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/api"},
				Headers:       []*route.HeaderMatcher{{Name: ":method", HeaderMatchSpecifier: strMatch(regex("GET|POST"))}},
				QueryParameters: []*route.QueryParameterMatcher{
					{Name: "debug", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}},
					{Name: "v", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "2"}}}},
					{Name: "id", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_StringMatch{StringMatch: regex("[a-f]+")}},
				},
			}, Action: toCluster(clB)}},
		{"split 90/10 with retries, timeout, rewrite", &configentry.Route{
			Splits:        []configentry.Split{{Weight: 90, TargetID: tgtV1}, {Weight: 10, TargetID: tgtV2, RequestHeaders: &consul.HTTPHeaderModifiers{Set: map[string]string{"x-split": "v2"}}}},
			PrefixRewrite: "/", RequestTimeout: 1500 * time.Millisecond, NumRetries: 3,
			RetryOnConnectFailure: true, RetryOn: []string{"reset", "connect-failure"}, RetryOnStatusCodes: []uint32{503, 502},
		}, &route.Route{Match: prefix("/"), Action: &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
				{Name: clV1, Weight: wrapperspb.UInt32(9000)},
				{Name: clV2, Weight: wrapperspb.UInt32(1000), RequestHeadersToAdd: []*core.HeaderValueOption{
					{Header: &core.HeaderValue{Key: "x-split", Value: "v2"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}}},
			}}},
			PrefixRewrite: "/",
			Timeout:       durationpb.New(1500 * time.Millisecond),
			RetryPolicy: &route.RetryPolicy{
				RetryOn: "connect-failure,reset,retriable-status-codes", NumRetries: wrapperspb.UInt32(3), RetriableStatusCodes: []uint32{503, 502},
			},
		}}}},
		{"retries on status codes only", &configentry.Route{Splits: to(tgtB), NumRetries: 3, RetryOnStatusCodes: []uint32{503}},
			&route.Route{Match: prefix("/"), Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clB},
				RetryPolicy:      &route.RetryPolicy{RetryOn: "retriable-status-codes", NumRetries: wrapperspb.UInt32(3), RetriableStatusCodes: []uint32{503}},
			}}}},
		{"header modifiers", &configentry.Route{Splits: to(tgtB),
			RequestHeaders:  &consul.HTTPHeaderModifiers{Add: map[string]string{"b": "2", "a": "1"}, Set: map[string]string{"c": "3"}, Remove: []string{"x-secret"}},
			ResponseHeaders: &consul.HTTPHeaderModifiers{Remove: []string{"server"}},
		}, &route.Route{Match: prefix("/"), Action: toCluster(clB),
			RequestHeadersToAdd: []*core.HeaderValueOption{
				{Header: &core.HeaderValue{Key: "a", Value: "1"}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
				{Header: &core.HeaderValue{Key: "b", Value: "2"}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
				{Header: &core.HeaderValue{Key: "c", Value: "3"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			},
			RequestHeadersToRemove:  []string{"x-secret"},
			ResponseHeadersToRemove: []string{"server"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := canaryChain(tc.in)
			rc, err := routeConfig("service-b", ch, clusterNamer(ch))
			if err != nil {
				t.Fatal(err)
			}
			if err := envoyvalidate.All(rc); err != nil {
				t.Fatalf("route config fails validation: %v", err)
			}
			vh := rc.GetVirtualHosts()
			if rc.GetName() != "service-b" || len(vh) != 1 || vh[0].GetName() != "service-b" || len(vh[0].GetDomains()) != 1 || vh[0].GetDomains()[0] != "*" {
				t.Fatalf("route config shape = %v", rc)
			}
			got := vh[0].GetRoutes()[0]
			if !proto.Equal(got, tc.want) {
				t.Errorf("route =\n%s\nwant\n%s", protojson.Format(got), protojson.Format(tc.want))
			}
			if last := vh[0].GetRoutes()[len(vh[0].GetRoutes())-1]; last.GetMatch().GetPrefix() != "/" || len(last.GetMatch().GetHeaders()) != 0 {
				t.Errorf("last route = %v, want the catch-all", last)
			}
		})
	}
}

func TestRouteOrderIsKept(t *testing.T) {
	ch := canaryChain(
		&configentry.Route{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/admin"}, Splits: to(tgtV2)},
		&configentry.Route{Match: &consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}, Splits: to(tgtV2)},
		&configentry.Route{Splits: []configentry.Split{{Weight: 90, TargetID: tgtV1}, {Weight: 10, TargetID: tgtV2}}, NumRetries: 3, RetryOnStatusCodes: []uint32{503}},
	)
	rc, err := routeConfig("service-b", ch, clusterNamer(ch))
	if err != nil {
		t.Fatal(err)
	}
	rs := rc.GetVirtualHosts()[0].GetRoutes()
	if len(rs) != 3 {
		t.Fatalf("%d routes, want 3", len(rs))
	}
	if rs[0].GetMatch().GetPrefix() != "/admin" || rs[0].GetRoute().GetCluster() != clV2 {
		t.Errorf("route 0 = %v", rs[0])
	}
	if rs[1].GetMatch().GetHeaders()[0].GetName() != "x-canary" || rs[1].GetRoute().GetCluster() != clV2 {
		t.Errorf("route 1 = %v", rs[1])
	}
	if len(rs[2].GetRoute().GetWeightedClusters().GetClusters()) != 2 {
		t.Errorf("route 2 = %v", rs[2])
	}
}

func TestSplitWeights(t *testing.T) {
	cases := []struct {
		name    string
		weights []float32
		want    []uint32
		wantErr bool
	}{
		{"halves", []float32{50, 50}, []uint32{5000, 5000}, false},
		{"thirds", []float32{33.33, 33.33, 33.34}, []uint32{3333, 3333, 3334}, false},
		{"float noise", []float32{33.333, 33.333, 33.334}, []uint32{3333, 3333, 3334}, false},
		{"fractions", []float32{0.5, 99.5}, []uint32{50, 9950}, false},
		{"not 100", []float32{50, 40}, nil, true},
		{"zero weight", []float32{100, 0}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var splits []configentry.Split
			for i, w := range tc.weights {
				splits = append(splits, configentry.Split{Weight: w, TargetID: []string{tgtB, tgtV1, tgtV2}[i]})
			}
			ch := canaryChain(&configentry.Route{Splits: splits})
			wc, err := weightedClusters(splits, clusterNamer(ch))
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidChain) {
					t.Fatalf("err = %v, want ErrInvalidChain", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sum uint32
			for i, c := range wc.GetClusters() {
				if c.GetWeight().GetValue() != tc.want[i] {
					t.Errorf("weight %d = %d, want %d", i, c.GetWeight().GetValue(), tc.want[i])
				}
				sum += c.GetWeight().GetValue()
			}
			if sum != totalWeight {
				t.Errorf("weights sum to %d", sum)
			}
		})
	}
}

func TestRouteToUnknownTarget(t *testing.T) {
	ch := canaryChain(&configentry.Route{Splits: to("nope.default.default.dc1")})
	if _, err := routeConfig("service-b", ch, clusterNamer(ch)); !errors.Is(err, ErrInvalidChain) {
		t.Fatalf("err = %v, want ErrInvalidChain", err)
	}
}

func TestHashPolicies(t *testing.T) {
	lb := &consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{
		{Field: "header", FieldValue: "x-user"},
		{Field: "cookie", FieldValue: "sess", CookieConfig: &consul.CookieConfig{Session: true}},
		{Field: "cookie", FieldValue: "id", CookieConfig: &consul.CookieConfig{TTL: time.Minute, Path: "/"}},
		{Field: "query_parameter", FieldValue: "u"},
		{SourceIP: true, Terminal: true},
	}}
	ch := canaryChain(&configentry.Route{Splits: to(tgtB)})
	ch.Targets[tgtB].LoadBalancer = lb
	rc, err := routeConfig("service-b", ch, clusterNamer(ch))
	if err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(rc); err != nil {
		t.Fatal(err)
	}
	hp := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
	want := []*route.RouteAction_HashPolicy{
		{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "sess", Ttl: durationpb.New(0)}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "id", Ttl: durationpb.New(time.Minute), Path: "/"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: "u"}}},
		{Terminal: true, PolicySpecifier: &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}},
	}
	if len(hp) != len(want) {
		t.Fatalf("hash policies = %v", hp)
	}
	for i := range want {
		if !proto.Equal(hp[i], want[i]) {
			t.Errorf("hash policy %d = %v, want %v", i, hp[i], want[i])
		}
	}
	ch.Targets[tgtB].LoadBalancer = &consul.LoadBalancer{Policy: "least_request", HashPolicies: lb.HashPolicies}
	rc, _ = routeConfig("service-b", ch, clusterNamer(ch))
	if got := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy(); len(got) != 0 {
		t.Errorf("least_request route has hash policies %v", got)
	}
}
