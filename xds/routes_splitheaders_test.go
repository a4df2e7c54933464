package xds

import (
	"fmt"
	"slices"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// A split's header changes apply even when it is the route's only split
// (a splitter of one split, or whose other splits weigh 0): Consul makes
// weighted clusters of every splitter.
func TestSingleSplitKeepsHeaders(t *testing.T) {
	set := configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"},
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web",
			Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}, "v2": {Filter: "Service.Meta.version == v2"}}},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "web", Splits: []consul.ServiceSplit{
			{Weight: 100, ServiceSubset: "v1",
				RequestHeaders:  &consul.HTTPHeaderModifiers{Set: map[string]string{"x-split": "v1"}},
				ResponseHeaders: &consul.HTTPHeaderModifiers{Remove: []string{"x-internal"}}},
			{Weight: 0, ServiceSubset: "v2"},
		}},
	)
	ch, err := set.Compile("web", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routeConfig("web", ch, clusterNamer(ch))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	r := rc.GetVirtualHosts()[0].GetRoutes()[0]
	var reqSet []string
	for _, h := range r.GetRequestHeadersToAdd() {
		reqSet = append(reqSet, h.GetHeader().GetKey()+"="+h.GetHeader().GetValue())
	}
	for _, cw := range r.GetRoute().GetWeightedClusters().GetClusters() {
		for _, h := range cw.GetRequestHeadersToAdd() {
			reqSet = append(reqSet, h.GetHeader().GetKey()+"="+h.GetHeader().GetValue())
		}
		if len(cw.GetResponseHeadersToRemove()) == 1 {
			reqSet = append(reqSet, "-"+cw.GetResponseHeadersToRemove()[0])
		}
	}
	reqSet = append(reqSet, r.GetResponseHeadersToRemove()...)
	if len(reqSet) != 2 || reqSet[0] != "x-split=v1" {
		t.Errorf("the only split's header changes = %v, want x-split=v1 set and x-internal removed; route %v", reqSet, r)
	}
}

// A split too small for Envoy's 1/10000 steps (a 0.01 % canary to a
// service that splits it 30/70 again) is left out of the route instead of
// failing the whole upstream: Consul accepts such splitters.
func TestTinyNestedSplitIsDropped(t *testing.T) {
	set := configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "api", Protocol: "http"},
		&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "api",
			Subsets: map[string]consul.ServiceResolverSubset{"a": {Filter: "Service.Meta.v == a"}, "b": {Filter: "Service.Meta.v == b"}}},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "web", Splits: []consul.ServiceSplit{
			{Weight: 99.99}, {Weight: 0.01, Service: "api"},
		}},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "api", Splits: []consul.ServiceSplit{
			{Weight: 30, ServiceSubset: "a"}, {Weight: 70, ServiceSubset: "b"},
		}},
	)
	for _, e := range set.List("") {
		if err := set.Check(e); err != nil {
			t.Fatalf("check %s: %v", configentry.KeyOf(e), err)
		}
	}
	ch, err := set.Compile("web", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routeConfig("web", ch, clusterNamer(ch))
	if err != nil {
		t.Fatalf("routes: %v", err)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	var sum uint32
	for _, cw := range rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
		if cw.GetWeight().GetValue() == 0 {
			t.Errorf("cluster %s has weight 0", cw.GetName())
		}
		sum += cw.GetWeight().GetValue()
	}
	if sum != totalWeight {
		t.Errorf("weights sum to %d", sum)
	}
}

// The route of nested splitters carries the header changes of both layers
// on each weighted cluster, and two splits to the same target with
// different header changes are two weighted clusters of that cluster, as
// Consul generates them.
func TestNestedSplitHeadersInRoute(t *testing.T) {
	set := func(kv ...string) *consul.HTTPHeaderModifiers {
		m := &consul.HTTPHeaderModifiers{Set: map[string]string{}}
		for i := 0; i < len(kv); i += 2 {
			m.Set[kv[i]] = kv[i+1]
		}
		return m
	}
	cs := configentry.NewSet(
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "api", Protocol: "http"},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "web", Splits: []consul.ServiceSplit{
			{Weight: 25, Service: "api", RequestHeaders: set("x-via", "web-a")},
			{Weight: 75, Service: "alias", RequestHeaders: set("x-via", "web-b", "x-outer", "1"), ResponseHeaders: set("x-from", "web")},
		}},
		&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "alias", Protocol: "http"},
		&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "alias", Splits: []consul.ServiceSplit{
			{Weight: 100, Service: "api", RequestHeaders: set("x-via", "alias"), ResponseHeaders: set("x-from", "alias", "x-alias", "1")},
		}},
	)
	ch, err := cs.Compile("web", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routeConfig("web", ch, clusterNamer(ch))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cw := range rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
		s := fmt.Sprintf("%s %d", cw.GetName(), cw.GetWeight().GetValue())
		for _, h := range cw.GetRequestHeadersToAdd() {
			s += " " + h.GetHeader().GetKey() + "=" + h.GetHeader().GetValue()
		}
		for _, h := range cw.GetResponseHeadersToAdd() {
			s += " resp:" + h.GetHeader().GetKey() + "=" + h.GetHeader().GetValue()
		}
		got = append(got, s)
	}
	api, _ := clusterNamer(ch)("api.default.default.dc1")
	want := []string{api + " 2500 x-via=web-a", api + " 7500 x-outer=1 x-via=alias resp:x-alias=1 resp:x-from=web"}
	if !slices.Equal(got, want) {
		t.Errorf("weighted clusters\n got %q\nwant %q", got, want)
	}
}
