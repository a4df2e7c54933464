package configentry

import (
	"errors"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func TestProtocol(t *testing.T) {
	pd := &consul.ProxyConfigEntry{Kind: ProxyDefaults, Name: GlobalName, Config: map[string]any{"protocol": "http2"}}
	cases := []struct {
		s    *Set
		want string
	}{
		{NewSet(), "tcp"},
		{NewSet(pd), "http2"},
		{NewSet(pd, defaults("web", "grpc")), "grpc"},
		{NewSet(pd, defaults("web", "")), "http2"},
		{NewSet(defaults("other", "http")), "tcp"},
	}
	for i, c := range cases {
		if got := c.s.Protocol("web"); got != c.want {
			t.Errorf("case %d: protocol %q, want %q", i, got, c.want)
		}
	}
}

func TestCheckConflicts(t *testing.T) {
	canary, es := canarySet(t)
	httpB := NewSet(defaults("service-b", "http"))
	cases := []struct {
		name string
		s    *Set
		e    Entry
		want string // "" : accepted
	}{
		{"router before protocol", NewSet(), es["04-service-b-router.hcl"], `needs service "service-b" to speak http, http2 or grpc, but its protocol is "tcp"`},
		{"splitter before protocol", NewSet(), splitter("web", consul.ServiceSplit{Weight: 100}), `needs service "web" to speak http`},
		{"splitter subset without resolver", httpB, es["03-service-b-splitter.hcl"], `subset "v1" of service "service-b" is not defined (no service-resolver`},
		{"splitter unknown subset", canary, splitter("service-b", consul.ServiceSplit{Weight: 50, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 50, ServiceSubset: "v3"}),
			`subset "v3" of service "service-b" is not defined by its service-resolver (it has v1, v2)`},
		{"weight-0 unknown subset", canary, splitter("service-b", consul.ServiceSplit{Weight: 0, ServiceSubset: "v3"}, consul.ServiceSplit{Weight: 100, ServiceSubset: "v2"}), ""},
		{"router unknown subset", canary, router("service-b", httpRoute(consul.ServiceRouteHTTPMatch{PathPrefix: "/x"}, &consul.ServiceRouteDestination{ServiceSubset: "v9"})),
			`Routes[0]: subset "v9"`},
		{"router to tcp service", canary, router("service-b", httpRoute(consul.ServiceRouteHTTPMatch{PathPrefix: "/x"}, &consul.ServiceRouteDestination{Service: "db"})),
			`service "db" has protocol "tcp" but "service-b" has "http"`},
		{"defaults to tcp under a router", canary, defaults("service-b", "tcp"), "needs service \"service-b\" to speak http"},
		{"defaults to grpc", canary, defaults("service-b", "grpc"), ""},
		{"resolver drops a used subset", canary, resolver("service-b", "v1"), `subset "v2" of service "service-b" is not defined`},
		{"resolver adds a subset", canary, with(resolver("service-b", "v1", "v2", "v3"), func(r *consul.ServiceResolverConfigEntry) { r.DefaultSubset = "v3" }), ""},
		{"redirect to unknown subset", NewSet(resolver("new", "v1")),
			&consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "old", Redirect: &consul.ServiceResolverRedirect{Service: "new", ServiceSubset: "v2"}},
			`Redirect: subset "v2" of service "new" is not defined`},
		{"failover to unknown subset", NewSet(resolver("backup")),
			with(resolver("web"), func(r *consul.ServiceResolverConfigEntry) {
				r.Failover = map[string]consul.ServiceResolverFailover{"*": {Service: "backup", ServiceSubset: "b1"}}
			}), `Failover["*"]: subset "b1" of service "backup"`},
		{"failover target to unknown subset", NewSet(resolver("backup")),
			with(resolver("web"), func(r *consul.ServiceResolverConfigEntry) {
				r.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{{Service: "backup", ServiceSubset: "b1"}}}}
			}), `Failover["*"].Targets[0]: subset "b1"`},
		{"redirect cycle", NewSet(&consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{Service: "b"}}),
			&consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "b", Redirect: &consul.ServiceResolverRedirect{Service: "a"}}, "redirect cycle"},
		{"splitter cycle", NewSet(defaults("a", "http"), defaults("b", "http"), splitter("a", consul.ServiceSplit{Weight: 100, Service: "b"})),
			splitter("b", consul.ServiceSplit{Weight: 100, Service: "a"}), "splitter cycle"},
		{"invalid entry", canary, splitter("service-b", consul.ServiceSplit{Weight: 50}), "must sum to 100"},
		// A set written inconsistently before does not block unrelated writes.
		{"old problems ignored", NewSet(router("legacy")), defaults("web", "http"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Check(c.e)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, c.want)
			}
			if c.name != "invalid entry" && !errors.Is(err, ErrConflict) {
				t.Errorf("error %v does not wrap ErrConflict", err)
			}
			if c.name == "invalid entry" && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestCheckDelete(t *testing.T) {
	canary, _ := canarySet(t)
	pd := &consul.ProxyConfigEntry{Kind: ProxyDefaults, Name: GlobalName, Config: map[string]any{"protocol": "http"}}
	viaGlobal := NewSet(pd, splitter("web", consul.ServiceSplit{Weight: 100}))
	cases := []struct {
		name string
		s    *Set
		k    Key
		want string
	}{
		{"resolver in use", canary, Key{ServiceResolver, "service-b"}, `service-router/service-b Routes[0]: subset "v2" of service "service-b" is not defined (no service-resolver`},
		{"defaults under a router", canary, Key{ServiceDefaults, "service-b"}, `protocol is "tcp"`},
		{"proxy-defaults under a splitter", viaGlobal, Key{ProxyDefaults, GlobalName}, `needs service "web" to speak http`},
		{"router", canary, Key{ServiceRouter, "service-b"}, ""},
		{"splitter", canary, Key{ServiceSplitter, "service-b"}, ""},
		{"absent", canary, Key{ServiceSplitter, "nope"}, ""},
		{"defaults of an unrouted service", NewSet(defaults("web", "http")), Key{ServiceDefaults, "web"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.CheckDelete(c.k)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrConflict containing %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "deleting "+c.k.String()) {
				t.Errorf("error %q does not name the entry", err)
			}
		})
	}
	// Once router and splitter are gone, the resolver may go too.
	s := canary.Without(Key{ServiceRouter, "service-b"}).Without(Key{ServiceSplitter, "service-b"})
	if err := s.CheckDelete(Key{ServiceResolver, "service-b"}); err != nil {
		t.Errorf("resolver no longer used: %v", err)
	}
}
