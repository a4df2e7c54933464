package configentry

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// canarySet is the set after writing config/canary/01..04 through Check.
func canarySet(t testing.TB) (*Set, map[string]Entry) {
	t.Helper()
	es := canaryEntries(t)
	s := NewSet()
	for _, f := range []string{"01-service-b-defaults.hcl", "02-service-b-resolver.hcl", "03-service-b-splitter.hcl", "04-service-b-router.hcl"} {
		if err := s.Check(es[f]); err != nil {
			t.Fatalf("check %s: %v", f, err)
		}
		s = s.With(es[f])
	}
	return s, es
}

// splitsOf renders a route's splits as "weight:target" for comparisons.
func splitsOf(r *Route) string {
	var parts []string
	for _, s := range r.Splits {
		parts = append(parts, fmt.Sprintf("%g:%s", s.Weight, s.TargetID))
	}
	return strings.Join(parts, ",")
}

func mustCompile(t *testing.T, s *Set, svc string) *Chain {
	t.Helper()
	c, err := s.Compile(svc, "dc1")
	if err != nil {
		t.Fatalf("compile %s: %v", svc, err)
	}
	return c
}

func TestCompileCanary(t *testing.T) {
	s, es := canarySet(t)
	c := mustCompile(t, s, "service-b")
	v1, v2 := "v1.service-b.default.default.dc1", "v2.service-b.default.default.dc1"
	if c.Protocol != "http" || c.Default || c.Service != "service-b" || c.Datacenter != "dc1" {
		t.Errorf("chain: %+v", c)
	}
	if len(c.Routes) != 4 {
		t.Fatalf("routes: %d", len(c.Routes))
	}
	want := []string{"100:" + v2, "100:" + v2, "90:" + v1 + ",10:" + v2, "90:" + v1 + ",10:" + v2}
	for i, r := range c.Routes {
		if got := splitsOf(r); got != want[i] {
			t.Errorf("route %d splits %s, want %s", i, got, want[i])
		}
	}
	if m := c.Routes[0].Match; m == nil || m.PathPrefix != "/admin" {
		t.Errorf("route 0 match %+v", m)
	}
	if m := c.Routes[1].Match; m == nil || len(m.Header) != 1 || m.Header[0].Name != "x-canary" || m.PathPrefix != "/" {
		t.Errorf("route 1 match %+v", m)
	}
	r2 := c.Routes[2]
	if r2.NumRetries != 3 || !reflect.DeepEqual(r2.RetryOnStatusCodes, []uint32{503}) {
		t.Errorf("route 2 retries %+v", r2)
	}
	if c.Routes[3].Match != nil || c.Routes[3].NumRetries != 0 {
		t.Errorf("catch-all %+v", c.Routes[3])
	}
	if len(c.Targets) != 2 || c.Targets[v1].Filter != "Service.Meta.version == v1" || c.Targets[v2].Subset != "v2" ||
		c.Targets[v2].ConnectTimeout != 5*time.Second || c.Targets[v1].Service != "service-b" {
		t.Errorf("targets %+v", c.Targets)
	}

	// Promotion: 0/100 drops v1 everywhere.
	promote := es["05-service-b-promote.json"]
	if err := s.Check(promote); err != nil {
		t.Fatal(err)
	}
	c = mustCompile(t, s.With(promote), "service-b")
	for i, r := range c.Routes {
		if got := splitsOf(r); got != "100:"+v2 {
			t.Errorf("promoted route %d: %s", i, got)
		}
	}
	if _, ok := c.Targets[v1]; ok || len(c.Targets) != 1 {
		t.Errorf("promoted targets %v", c.Targets)
	}
}

func TestCompileDefaults(t *testing.T) {
	c := mustCompile(t, NewSet(), "web")
	id := "web.default.default.dc1"
	if !c.Default || c.Protocol != ProtocolTCP || len(c.Routes) != 1 || c.Routes[0].Match != nil ||
		splitsOf(c.Routes[0]) != "100:"+id || c.Targets[id].ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("default chain %+v %+v", c, c.Targets)
	}
	var none *Set
	if c, err := none.Compile("web", "dc1"); err != nil || !c.Default || splitsOf(c.Routes[0]) != "100:"+id {
		t.Errorf("nil set: %+v %v", c, err)
	}
	if err := none.Check(defaults("web", "http")); err != nil {
		t.Errorf("nil set check: %v", err)
	}
	c = mustCompile(t, NewSet(defaults("web", "http")), "web")
	if c.Default || c.Protocol != "http" || len(c.Routes) != 1 || splitsOf(c.Routes[0]) != "100:"+id {
		t.Errorf("http chain %+v", c)
	}
	// A tcp chain ignores no resolver: default subset, timeouts, LB.
	r := with(resolver("db", "primary"), func(r *consul.ServiceResolverConfigEntry) {
		r.DefaultSubset = "primary"
		r.ConnectTimeout = 2 * time.Second
		r.Subsets["primary"] = consul.ServiceResolverSubset{Filter: `"primary" in Service.Tags`, OnlyPassing: true}
		r.LoadBalancer = &consul.LoadBalancer{Policy: LBLeastRequest}
	})
	c = mustCompile(t, NewSet(r), "db")
	tg := c.Targets["primary.db.default.default.dc1"]
	if c.Default || c.Protocol != "tcp" || splitsOf(c.Routes[0]) != "100:primary.db.default.default.dc1" || tg == nil ||
		!tg.OnlyPassing || tg.ConnectTimeout != 2*time.Second || tg.LoadBalancer.Policy != LBLeastRequest {
		t.Errorf("tcp resolver chain %+v %+v", c, tg)
	}
	if got := TargetID("a", "", "dc2"); got != "a.default.default.dc2" {
		t.Errorf("TargetID = %s", got)
	}
}

func TestCompileRedirect(t *testing.T) {
	old := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "old",
		Redirect: &consul.ServiceResolverRedirect{Service: "new", Datacenter: "dc2"}}
	s := NewSet(old, with(resolver("new", "v1", "v2"), func(r *consul.ServiceResolverConfigEntry) { r.DefaultSubset = "v2" }))
	c := mustCompile(t, s, "old")
	if got := splitsOf(c.Routes[0]); got != "100:v2.new.default.default.dc2" {
		t.Errorf("redirect: %s", got)
	}
	if tg := c.Targets["v2.new.default.default.dc2"]; tg == nil || tg.Filter != "Service.Meta.version == v2" || tg.Datacenter != "dc2" {
		t.Errorf("redirect target %+v", tg)
	}
	old.Redirect = &consul.ServiceResolverRedirect{Service: "new", ServiceSubset: "v1"}
	if got := splitsOf(mustCompile(t, s, "old").Routes[0]); got != "100:v1.new.default.default.dc1" {
		t.Errorf("redirect to subset: %s", got)
	}
	// Redirect cycles are conflicts.
	a := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{Service: "b"}}
	b := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "b", Redirect: &consul.ServiceResolverRedirect{Service: "a"}}
	if _, err := NewSet(a, b).Compile("a", "dc1"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "redirect cycle") {
		t.Errorf("redirect cycle: %v", err)
	}
}

func TestCompileFailover(t *testing.T) {
	web := with(resolver("web", "v1", "v2"), func(r *consul.ServiceResolverConfigEntry) {
		r.DefaultSubset = "v1"
		r.Failover = map[string]consul.ServiceResolverFailover{
			"v1": {ServiceSubset: "v2"},
			"*":  {Datacenters: []string{"dc2", "dc3"}},
		}
	})
	s := NewSet(web)
	c := mustCompile(t, s, "web")
	v1 := c.Targets["v1.web.default.default.dc1"]
	if v1 == nil || !reflect.DeepEqual(v1.Failover, []string{"v2.web.default.default.dc1"}) {
		t.Fatalf("v1 failover %+v", v1)
	}
	if c.Targets["v2.web.default.default.dc1"] == nil || len(c.Targets) != 2 {
		t.Errorf("failover targets %v", c.Targets)
	}
	// "*" applies to the other subsets: v2 fails over to the same subset elsewhere.
	web.DefaultSubset = "v2"
	c = mustCompile(t, s, "web")
	v2 := c.Targets["v2.web.default.default.dc1"]
	if want := []string{"v2.web.default.default.dc2", "v2.web.default.default.dc3"}; !reflect.DeepEqual(v2.Failover, want) {
		t.Errorf("v2 failover %v, want %v", v2.Failover, want)
	}
	// Targets: another service (its default subset), then this subset in dc2.
	web.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{
		{Service: "backup"}, {Datacenter: "dc2"},
	}}}
	s = NewSet(web, with(resolver("backup", "main"), func(r *consul.ServiceResolverConfigEntry) { r.DefaultSubset = "main" }))
	c = mustCompile(t, s, "web")
	want := []string{"main.backup.default.default.dc1", "v2.web.default.default.dc2"}
	if got := c.Targets["v2.web.default.default.dc1"].Failover; !reflect.DeepEqual(got, want) {
		t.Errorf("targets failover %v, want %v", got, want)
	}
	if c.Targets["main.backup.default.default.dc1"].Filter != "Service.Meta.version == main" {
		t.Errorf("failover target lacks its filter: %+v", c.Targets["main.backup.default.default.dc1"])
	}
}

func TestCompileNestedSplits(t *testing.T) {
	s := NewSet(defaults("web", "http"), defaults("api", "http"),
		resolver("web", "v1"), resolver("api", "a", "b"),
		splitter("web", consul.ServiceSplit{Weight: 50, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 50, Service: "api"},
			consul.ServiceSplit{Weight: 0, ServiceSubset: "gone"}),
		splitter("api", consul.ServiceSplit{Weight: 80, ServiceSubset: "a"}, consul.ServiceSplit{Weight: 20, ServiceSubset: "b"}),
		router("web", httpRoute(consul.ServiceRouteHTTPMatch{PathPrefix: "/api"},
			&consul.ServiceRouteDestination{Service: "api", PrefixRewrite: "/", RequestTimeout: 3 * time.Second})),
	)
	c := mustCompile(t, s, "web")
	want := "50:v1.web.default.default.dc1,40:a.api.default.default.dc1,10:b.api.default.default.dc1"
	if got := splitsOf(c.Routes[1]); got != want {
		t.Errorf("nested splits %s, want %s", got, want)
	}
	r0 := c.Routes[0]
	if got := splitsOf(r0); got != "80:a.api.default.default.dc1,20:b.api.default.default.dc1" ||
		r0.PrefixRewrite != "/" || r0.RequestTimeout != 3*time.Second {
		t.Errorf("router to api: %s %+v", got, r0)
	}
	var sum float32
	for _, sp := range c.Routes[1].Splits {
		sum += sp.Weight
	}
	if sum < 99.99 || sum > 100.01 {
		t.Errorf("weights sum to %v", sum)
	}
	// Splitter cycles are conflicts.
	cyc := NewSet(defaults("a", "http"), defaults("b", "http"),
		splitter("a", consul.ServiceSplit{Weight: 100, Service: "b"}),
		splitter("b", consul.ServiceSplit{Weight: 100, Service: "a"}))
	if _, err := cyc.Compile("a", "dc1"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "splitter cycle") {
		t.Errorf("splitter cycle: %v", err)
	}
	// A split of a service to itself (no subset) goes to its resolver.
	self := NewSet(defaults("a", "http"), splitter("a", consul.ServiceSplit{Weight: 60}, consul.ServiceSplit{Weight: 40, Service: "b"}))
	if got := splitsOf(mustCompile(t, self, "a").Routes[0]); got != "60:a.default.default.dc1,40:b.default.default.dc1" {
		t.Errorf("self split: %s", got)
	}
}

func TestCompileRequestTimeoutFromResolver(t *testing.T) {
	r := with(resolver("web"), func(r *consul.ServiceResolverConfigEntry) { r.RequestTimeout = 7 * time.Second })
	s := NewSet(defaults("web", "http"), r, router("web", httpRoute(consul.ServiceRouteHTTPMatch{PathExact: "/x"}, nil)))
	c := mustCompile(t, s, "web")
	if c.Routes[0].RequestTimeout != 7*time.Second || c.Routes[0].Match.PathExact != "/x" {
		t.Errorf("route %+v", c.Routes[0])
	}
}

// benchSet has n services, each with service-defaults, a router, a
// splitter and a resolver (the "1,000 services with routers").
func benchSet(n int) *Set {
	var es []Entry
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		es = append(es, defaults(name, "http"),
			with(resolver(name, "v1", "v2"), func(r *consul.ServiceResolverConfigEntry) { r.DefaultSubset = "v1" }),
			splitter(name, consul.ServiceSplit{Weight: 90, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 10, ServiceSubset: "v2"}),
			router(name,
				httpRoute(consul.ServiceRouteHTTPMatch{PathPrefix: "/admin"}, &consul.ServiceRouteDestination{ServiceSubset: "v2"}),
				httpRoute(consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}},
					&consul.ServiceRouteDestination{ServiceSubset: "v2", NumRetries: 3, RetryOnStatusCodes: []uint32{503}})))
	}
	return NewSet(es...)
}

func TestBenchSetCompiles(t *testing.T) {
	s := benchSet(20)
	for i := 0; i < 20; i++ {
		c := mustCompile(t, s, fmt.Sprintf("svc-%d", i))
		if len(c.Routes) != 3 || len(c.Targets) != 2 {
			t.Fatalf("chain %d: %d routes %d targets", i, len(c.Routes), len(c.Targets))
		}
	}
}

func BenchmarkCompile1000(b *testing.B) {
	s := benchSet(1000)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("svc-%d", i)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, n := range names {
			if _, err := s.Compile(n, "dc1"); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkCheck1000(b *testing.B) {
	s := benchSet(1000)
	e := splitter("svc-1", consul.ServiceSplit{Weight: 50, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 50, ServiceSubset: "v2"})
	for b.Loop() {
		if err := s.Check(e); err != nil {
			b.Fatal(err)
		}
	}
}

func TestIntegerWeights(t *testing.T) {
	cases := []struct {
		w    []float32
		want []uint32
	}{
		{[]float32{90, 10}, []uint32{9000, 1000}},
		{[]float32{33.33, 33.33, 33.34}, []uint32{3333, 3333, 3334}},
		{[]float32{100.0 / 3, 100.0 / 3, 100.0 / 3}, []uint32{3334, 3333, 3333}},
		{[]float32{72, 18, 10}, []uint32{7200, 1800, 1000}},
		{[]float32{100}, []uint32{10000}},
	}
	for _, c := range cases {
		var splits []Split
		for _, w := range c.w {
			splits = append(splits, Split{Weight: w})
		}
		got := IntegerWeights(splits, 10000)
		var sum uint32
		for _, g := range got {
			sum += g
		}
		if sum != 10000 || !reflect.DeepEqual(got, c.want) {
			t.Errorf("IntegerWeights(%v) = %v (sum %d), want %v", c.w, got, sum, c.want)
		}
	}
}

// Failover to itself, or to a service that redirects back, is no cycle:
// such hops are dropped.
func TestCompileFailoverSelf(t *testing.T) {
	web := with(resolver("web", "v1"), func(r *consul.ServiceResolverConfigEntry) {
		r.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{
			{ServiceSubset: "v1"}, {Service: "alias"}, {Service: "backup"},
		}}}
	})
	alias := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "alias", Redirect: &consul.ServiceResolverRedirect{Service: "web", ServiceSubset: "v1"}}
	s := NewSet(web, alias)
	for _, e := range []Entry{web, alias} {
		if err := s.Check(e); err != nil {
			t.Fatalf("check %s: %v", KeyOf(e), err)
		}
	}
	c := mustCompile(t, s, "web")
	want := []string{"v1.web.default.default.dc1", "backup.default.default.dc1"}
	if got := c.Targets["web.default.default.dc1"].Failover; !reflect.DeepEqual(got, want) {
		t.Errorf("failover without a default subset %v, want %v", got, want)
	}
	r, _ := s.Get(ServiceResolver, "web").(*consul.ServiceResolverConfigEntry)
	r.DefaultSubset = "v1"
	c = mustCompile(t, s, "web")
	if got := c.Targets["v1.web.default.default.dc1"].Failover; !reflect.DeepEqual(got, []string{"backup.default.default.dc1"}) {
		t.Errorf("failover %v", got)
	}
}

// A resolver that redirects its own service to another datacenter (Consul's
// documented "send db to dc2") applies once: the redirected target is
// resolved with the same resolver, whose redirect then changes nothing.
func TestCompileRedirectToOtherDatacenter(t *testing.T) {
	db := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "db",
		Redirect: &consul.ServiceResolverRedirect{Datacenter: "dc2"}}
	s := NewSet(db)
	if err := s.Check(db); err != nil {
		t.Fatalf("check: %v", err)
	}
	c := mustCompile(t, s, "db")
	if got := splitsOf(c.Routes[0]); got != "100:db.default.default.dc2" {
		t.Errorf("redirect to dc2: %s", got)
	}
}

// A failover target naming only this service keeps the subset being
// resolved, as Consul's rewrite of the target does, instead of taking the
// default subset: for v2 it is v2 itself, so it is dropped, and in another
// datacenter it is v2 there.
func TestCompileFailoverTargetSameServiceKeepsSubset(t *testing.T) {
	web := with(resolver("web", "v1", "v2"), func(r *consul.ServiceResolverConfigEntry) {
		r.DefaultSubset = "v1"
		r.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{
			{Service: "web"}, {Service: "web", Datacenter: "dc2"}, {Service: "backup"},
		}}}
	})
	s := NewSet(defaults("web", "http"), defaults("backup", "http"), web,
		splitter("web", consul.ServiceSplit{Weight: 100, ServiceSubset: "v2"}),
		router("web", httpRoute(consul.ServiceRouteHTTPMatch{PathPrefix: "/v1"}, &consul.ServiceRouteDestination{ServiceSubset: "v1"})))
	for _, e := range s.List("") {
		if err := s.Check(e); err != nil {
			t.Fatalf("check %s: %v", KeyOf(e), err)
		}
	}
	c := mustCompile(t, s, "web")
	for subset, want := range map[string][]string{
		"v2": {"v2.web.default.default.dc2", "backup.default.default.dc1"},
		"v1": {"v1.web.default.default.dc2", "backup.default.default.dc1"},
	} {
		tg := c.Targets[TargetID("web", subset, "dc1")]
		if tg == nil || !reflect.DeepEqual(tg.Failover, want) {
			t.Errorf("%s failover %+v, want %v", subset, tg, want)
		}
	}
}
