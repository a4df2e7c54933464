package configentry

import (
	"errors"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

func router(name string, routes ...consul.ServiceRoute) *consul.ServiceRouterConfigEntry {
	return &consul.ServiceRouterConfigEntry{Kind: ServiceRouter, Name: name, Routes: routes}
}

func httpRoute(m consul.ServiceRouteHTTPMatch, d *consul.ServiceRouteDestination) consul.ServiceRoute {
	return consul.ServiceRoute{Match: &consul.ServiceRouteMatch{HTTP: &m}, Destination: d}
}

func splitter(name string, splits ...consul.ServiceSplit) *consul.ServiceSplitterConfigEntry {
	return &consul.ServiceSplitterConfigEntry{Kind: ServiceSplitter, Name: name, Splits: splits}
}

func resolver(name string, subsets ...string) *consul.ServiceResolverConfigEntry {
	r := &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: name}
	for _, s := range subsets {
		if r.Subsets == nil {
			r.Subsets = map[string]consul.ServiceResolverSubset{}
		}
		r.Subsets[s] = consul.ServiceResolverSubset{Filter: "Service.Meta.version == " + s}
	}
	return r
}

func defaults(name, protocol string) *consul.ServiceConfigEntry {
	return &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: name, Protocol: protocol}
}

func with[T any](v T, f func(T)) T { f(v); return v }

func TestValidateOK(t *testing.T) {
	for _, e := range []Entry{
		defaults("web", "HTTP2"),
		&consul.ProxyConfigEntry{Kind: "Proxy-Defaults", Config: map[string]any{"Protocol": "GRPC"}},
		router("web", httpRoute(consul.ServiceRouteHTTPMatch{
			PathRegex: "/api/v[0-9]+/.*", Methods: []string{"get", "POST"},
			Header:     []consul.ServiceRouteHTTPMatchHeader{{Name: "x-a", Present: true}, {Name: "x-b", Suffix: "z", Invert: true}},
			QueryParam: []consul.ServiceRouteHTTPMatchQueryParam{{Name: "debug", Exact: "1"}, {Name: "q", Regex: "^a+$"}},
		}, &consul.ServiceRouteDestination{Service: "api", RequestTimeout: time.Second, RetryOn: []string{"5xx", "reset"}})),
		splitter("web", consul.ServiceSplit{Weight: 33.33, ServiceSubset: "a"}, consul.ServiceSplit{Weight: 33.33, ServiceSubset: "b"},
			consul.ServiceSplit{Weight: 33.34, Service: "other"}),
		splitter("web", consul.ServiceSplit{Weight: 0, ServiceSubset: "a"}, consul.ServiceSplit{Weight: 100, ServiceSubset: "b"}),
		with(resolver("web", "v1", "v2"), func(r *consul.ServiceResolverConfigEntry) {
			r.DefaultSubset = "v1"
			r.Failover = map[string]consul.ServiceResolverFailover{"v1": {ServiceSubset: "v2"}, "*": {Datacenters: []string{"dc2"}}}
			r.LoadBalancer = &consul.LoadBalancer{Policy: "Maglev", HashPolicies: []consul.HashPolicy{{Field: "header", FieldValue: "x-user"}}}
		}),
		&consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "old", Redirect: &consul.ServiceResolverRedirect{Service: "new", ServiceSubset: "v2"}},
	} {
		if err := Validate(e); err != nil {
			t.Errorf("%s: %v", KeyOf(e), err)
		}
	}
	p := &consul.ProxyConfigEntry{Kind: "Proxy-Defaults", Config: map[string]any{"Protocol": "GRPC"}}
	if err := Validate(p); err != nil || p.Kind != ProxyDefaults || p.Name != GlobalName || p.Config["protocol"] != "grpc" {
		t.Errorf("proxy-defaults not normalized: %v %+v", err, p)
	}
	d := defaults("web", "HTTP2")
	if err := Validate(d); err != nil || d.Protocol != "http2" {
		t.Errorf("protocol not lower-cased: %+v", d)
	}
}

func TestValidateErrors(t *testing.T) {
	m := func(m consul.ServiceRouteHTTPMatch) *consul.ServiceRouterConfigEntry {
		return router("web", httpRoute(m, nil))
	}
	d := func(d consul.ServiceRouteDestination) *consul.ServiceRouterConfigEntry {
		return router("web", httpRoute(consul.ServiceRouteHTTPMatch{}, &d))
	}
	res := func(f func(r *consul.ServiceResolverConfigEntry)) *consul.ServiceResolverConfigEntry {
		return with(resolver("web", "v1", "v2"), f)
	}
	lb := func(l consul.LoadBalancer) *consul.ServiceResolverConfigEntry {
		return res(func(r *consul.ServiceResolverConfigEntry) { r.LoadBalancer = &l })
	}
	hdr := func(h consul.ServiceRouteHTTPMatchHeader) *consul.ServiceRouterConfigEntry {
		return m(consul.ServiceRouteHTTPMatch{Header: []consul.ServiceRouteHTTPMatchHeader{h}})
	}
	qp := func(q consul.ServiceRouteHTTPMatchQueryParam) *consul.ServiceRouterConfigEntry {
		return m(consul.ServiceRouteHTTPMatch{QueryParam: []consul.ServiceRouteHTTPMatchQueryParam{q}})
	}
	cases := []struct {
		name string
		e    Entry
		want string
	}{
		{"unknown kind", &consul.MeshConfigEntry{}, "unknown config entry kind"},
		{"no name", defaults("", "http"), "Name is required"},
		{"bad name", defaults("we b", "http"), "not a valid service name"},
		{"namespace", &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: "x", Namespace: "ns1"}, "only the default namespace"},
		{"proxy-defaults name", &consul.ProxyConfigEntry{Kind: ProxyDefaults, Name: "web"}, `must be named "global"`},
		{"proxy-defaults protocol", &consul.ProxyConfigEntry{Kind: ProxyDefaults, Config: map[string]any{"protocol": "udp"}}, `Config.protocol "udp"`},
		{"protocol", defaults("web", "websocket"), `Protocol "websocket" is not one of tcp, http, http2, grpc`},
		{"negative", &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: "x", LocalConnectTimeoutMs: -1}, "LocalConnectTimeoutMs must be >= 0"},
		{"no splits", splitter("web"), "no Splits configured"},
		{"sum", splitter("web", consul.ServiceSplit{Weight: 90, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 9, ServiceSubset: "v2"}), "must sum to 100, not 99"},
		{"weight range", splitter("web", consul.ServiceSplit{Weight: 101}), "Splits[0].Weight 101 must be between 0 and 100"},
		{"negative weight", splitter("web", consul.ServiceSplit{Weight: -10, ServiceSubset: "a"}, consul.ServiceSplit{Weight: 110}), "between 0 and 100"},
		{"dup split", splitter("web", consul.ServiceSplit{Weight: 50, ServiceSubset: "v1"}, consul.ServiceSplit{Weight: 50, Service: "web", ServiceSubset: "v1"}), "occurs more than once"},
		{"split subset name", splitter("web", consul.ServiceSplit{Weight: 100, ServiceSubset: "V_1"}), `ServiceSubset "V_1" is not a valid subset name`},
		{"paths", m(consul.ServiceRouteHTTPMatch{PathExact: "/a", PathPrefix: "/b"}), "mutually exclusive"},
		{"path slash", m(consul.ServiceRouteHTTPMatch{PathPrefix: "admin"}), `PathPrefix "admin" does not start with "/"`},
		{"exact slash", m(consul.ServiceRouteHTTPMatch{PathExact: "admin"}), `PathExact "admin" does not start with "/"`},
		{"regex", m(consul.ServiceRouteHTTPMatch{PathRegex: "/a(["}), "PathRegex \"/a([\" does not compile"},
		{"header none", hdr(consul.ServiceRouteHTTPMatchHeader{Name: "x"}), "exactly one of Present, Exact, Prefix, Suffix or Regex"},
		{"header two", hdr(consul.ServiceRouteHTTPMatchHeader{Name: "x", Exact: "a", Prefix: "b"}), "exactly one of"},
		{"header name", hdr(consul.ServiceRouteHTTPMatchHeader{Exact: "a"}), "Header[0]: Name is required"},
		{"header regex", hdr(consul.ServiceRouteHTTPMatchHeader{Name: "x", Regex: "*"}), "Header[0].Regex"},
		{"query none", qp(consul.ServiceRouteHTTPMatchQueryParam{Name: "x"}), "exactly one of Present, Exact or Regex"},
		{"query name", qp(consul.ServiceRouteHTTPMatchQueryParam{Present: true}), "QueryParam[0]: Name is required"},
		{"query regex", qp(consul.ServiceRouteHTTPMatchQueryParam{Name: "x", Regex: "(("}), "QueryParam[0].Regex"},
		{"method", m(consul.ServiceRouteHTTPMatch{Methods: []string{"FETCH"}}), `"FETCH" is not a valid HTTP method`},
		{"dup method", m(consul.ServiceRouteHTTPMatch{Methods: []string{"GET", "get"}}), "given twice"},
		{"rewrite", router("web", consul.ServiceRoute{Destination: &consul.ServiceRouteDestination{PrefixRewrite: "/"}}), "PrefixRewrite needs a PathExact or PathPrefix match"},
		{"status", d(consul.ServiceRouteDestination{RetryOnStatusCodes: []uint32{503, 42}}), "42 is not an HTTP status code"},
		{"retry on", d(consul.ServiceRouteDestination{RetryOn: []string{"sometimes"}}), `"sometimes" is not a retry condition`},
		{"timeout", d(consul.ServiceRouteDestination{RequestTimeout: -time.Second}), "RequestTimeout -1s must be >= 0"},
		{"dest subset", d(consul.ServiceRouteDestination{ServiceSubset: "Bad"}), "not a valid subset name"},
		{"subset name", resolver("web", "v.1"), `"v.1" is not a valid subset name`},
		{"filter syntax", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Subsets["v1"] = consul.ServiceResolverSubset{Filter: "Service.Meta.version =="}
		}), `Subsets["v1"]: filter`},
		{"filter selector", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Subsets["v1"] = consul.ServiceResolverSubset{Filter: "Service.Version == v1"}
		}), `selector "Service.Version" is not valid`},
		{"default subset", res(func(r *consul.ServiceResolverConfigEntry) { r.DefaultSubset = "v3" }), `DefaultSubset "v3" is not a subset`},
		{"redirect+subsets", res(func(r *consul.ServiceResolverConfigEntry) { r.Redirect = &consul.ServiceResolverRedirect{Service: "x"} }), "Redirect and Subsets cannot both be set"},
		{"redirect empty", &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{}}, "Redirect is empty"},
		{"redirect subset", &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{ServiceSubset: "v1"}}, "defined without Redirect.Service"},
		{"redirect self", &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{Service: "a"}}, "points back"},
		{"redirect+failover", &consul.ServiceResolverConfigEntry{Kind: ServiceResolver, Name: "a", Redirect: &consul.ServiceResolverRedirect{Service: "b"},
			Failover: map[string]consul.ServiceResolverFailover{"*": {Service: "c"}}}, "Redirect and Failover cannot both be set"},
		{"failover key", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"v9": {Service: "x"}}
		}), `Failover["v9"]: "v9" is not a subset`},
		{"failover empty", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"*": {}}
		}), "one of Service, ServiceSubset, Datacenters or Targets is required"},
		{"failover subset", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"*": {ServiceSubset: "v7"}}
		}), `ServiceSubset "v7" is not a subset of "web"`},
		{"failover targets+service", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"*": {Service: "x", Targets: []consul.ServiceResolverFailoverTarget{{Service: "y"}}}}
		}), "Targets cannot be set with"},
		{"failover target empty", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{{}}}}
		}), "Targets[0] is empty"},
		{"failover dc", res(func(r *consul.ServiceResolverConfigEntry) {
			r.Failover = map[string]consul.ServiceResolverFailover{"*": {Datacenters: []string{""}}}
		}), "Datacenters[0] is empty"},
		{"connect timeout", res(func(r *consul.ServiceResolverConfigEntry) { r.ConnectTimeout = -time.Second }), "ConnectTimeout -1s must be >= 0"},
		{"lb policy", lb(consul.LoadBalancer{Policy: "fastest"}), `LoadBalancer.Policy "fastest"`},
		{"lb hash", lb(consul.LoadBalancer{Policy: "least_request", HashPolicies: []consul.HashPolicy{{SourceIP: true}}}), "HashPolicies are only for policies ring_hash and maglev"},
		{"lb ring cfg", lb(consul.LoadBalancer{Policy: "maglev", RingHashConfig: &consul.RingHashConfig{}}), "RingHashConfig is only for policy ring_hash"},
		{"lb ring size", lb(consul.LoadBalancer{Policy: "ring_hash", RingHashConfig: &consul.RingHashConfig{MinimumRingSize: 10, MaximumRingSize: 5}}), "exceeds MaximumRingSize"},
		{"lb least cfg", lb(consul.LoadBalancer{Policy: "random", LeastRequestConfig: &consul.LeastRequestConfig{}}), "LeastRequestConfig is only for policy least_request"},
		{"hash field", lb(consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "path", FieldValue: "x"}}}), `Field "path" is not one of`},
		{"hash value", lb(consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "header"}}}), "needs a FieldValue"},
		{"hash source", lb(consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "header", FieldValue: "a", SourceIP: true}}}), "SourceIP cannot be set with Field"},
		{"hash cookie", lb(consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "header", FieldValue: "a", CookieConfig: &consul.CookieConfig{}}}}), "CookieConfig is only for Field"},
		{"hash cookie ttl", lb(consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "cookie", FieldValue: "a", CookieConfig: &consul.CookieConfig{Session: true, TTL: time.Second}}}}), "Session and TTL cannot both be set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.e)
			t.Log(err)
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnknownKind) {
				t.Errorf("error %v wraps neither ErrInvalid nor ErrUnknownKind", err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line containing %q", err, c.want)
			}
			if strings.Count(err.Error(), ErrInvalid.Error()) > 1 {
				t.Errorf("sentinel repeated: %q", err)
			}
		})
	}
}
