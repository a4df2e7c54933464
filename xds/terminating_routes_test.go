package xds

import (
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// terminatingRoutes builds the gateway of testTerminating with entries
// and returns the route action of each HTTP filter chain, by chain name.
func terminatingRoutes(t *testing.T, entries ...configentry.Entry) map[string]*route.RouteAction {
	t.Helper()
	res, err := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(entries...)}.proxy(testTerminating(23000))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.listeners) != 1 {
		t.Fatalf("listeners = %v", res.listeners)
	}
	if err := envoyvalidate.All(res.listeners[0]); err != nil {
		t.Fatal(err)
	}
	out := map[string]*route.RouteAction{}
	for _, fc := range res.listeners[0].GetFilterChains() {
		fs := fc.GetFilters()
		if len(fs) != 2 || fs[1].GetName() != hcmFilter {
			continue
		}
		m, err := unpackHCM(fs[1])
		if err != nil {
			t.Fatal(err)
		}
		rc := m.GetRouteConfig()
		if err := rc.ValidateAll(); err != nil {
			t.Errorf("chain %s: routes: %v", fc.GetName(), err)
		}
		out[fc.GetName()] = rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	}
	return out
}

// An HTTP linked service's route (and each subset's) carries its
// resolver's RequestTimeout and ring_hash hash policies, as Consul's
// terminating gateway routes do; a service-router plays no part there.
func TestTerminatingGatewayRouteResolverSettings(t *testing.T) {
	lb := &consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{
		{Field: "header", FieldValue: "x-user"},
		{Field: "cookie", FieldValue: "session", CookieConfig: &consul.CookieConfig{TTL: 30 * time.Second, Path: "/"}},
		{SourceIP: true, Terminal: true},
	}}
	linked := &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{{Name: "db"}}}
	httpDB := &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "http"}
	routes := terminatingRoutes(t, httpDB, linked,
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db", RequestTimeout: 12 * time.Second, LoadBalancer: lb,
			Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}},
		&consul.ServiceRouterConfigEntry{Kind: consul.ServiceRouter, Name: "db", Routes: []consul.ServiceRoute{{
			Match: &consul.ServiceRouteMatch{HTTP: &consul.ServiceRouteHTTPMatch{PathPrefix: "/"}}, Destination: &consul.ServiceRouteDestination{RequestTimeout: time.Minute}}}},
	)
	wantHash := []*route.RouteAction_HashPolicy{
		{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "session", Ttl: durationpb.New(30 * time.Second), Path: "/"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}, Terminal: true},
	}
	db := ClusterName("db", "dc1", testTD)
	for _, name := range []string{db, "v1." + db} {
		a := routes[name]
		if a == nil {
			t.Fatalf("no HTTP chain %s in %v", name, routes)
		}
		if a.GetCluster() != name {
			t.Errorf("chain %s routes to %q", name, a.GetCluster())
		}
		if got := a.GetTimeout().AsDuration(); got != 12*time.Second {
			t.Errorf("chain %s: timeout %s, want the resolver's 12s", name, got)
		}
		if len(a.GetHashPolicy()) != len(wantHash) {
			t.Fatalf("chain %s: hash policies %v, want %v", name, a.GetHashPolicy(), wantHash)
		}
		for i, h := range a.GetHashPolicy() {
			if !proto.Equal(h, wantHash[i]) {
				t.Errorf("chain %s: hash policy %d = %v, want %v", name, i, h, wantHash[i])
			}
		}
	}

	// No resolver: Envoy's default timeout, no hashing.
	a := terminatingRoutes(t, httpDB, linked)[db]
	if a == nil || a.GetTimeout() != nil || len(a.GetHashPolicy()) != 0 {
		t.Errorf("without a resolver: route %v", a)
	}
	// A resolver that does not hash (round robin): its timeout alone.
	a = terminatingRoutes(t, httpDB, linked, &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "db", RequestTimeout: 3 * time.Second})[db]
	if a == nil || a.GetTimeout().AsDuration() != 3*time.Second || len(a.GetHashPolicy()) != 0 {
		t.Errorf("round robin resolver: route %v", a)
	}
}
