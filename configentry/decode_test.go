package configentry

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// canaryEntries parses the repo's config/canary examples (the L7
// walkthrough), in file order.
func canaryEntries(t testing.TB) map[string]Entry {
	t.Helper()
	files, err := filepath.Glob("../config/canary/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no config/canary files: %v", err)
	}
	out := map[string]Entry{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Parse(filepath.Base(f), src)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		if err := Validate(e); err != nil {
			t.Fatalf("validate %s: %v", f, err)
		}
		out[filepath.Base(f)] = e
	}
	return out
}

func TestParseCanaryFiles(t *testing.T) {
	es := canaryEntries(t)
	sd := es["01-service-b-defaults.hcl"].(*consul.ServiceConfigEntry)
	if sd.Kind != ServiceDefaults || sd.Name != "service-b" || sd.Protocol != "http" {
		t.Errorf("defaults: %+v", sd)
	}
	res := es["02-service-b-resolver.hcl"].(*consul.ServiceResolverConfigEntry)
	if res.DefaultSubset != "v1" || res.ConnectTimeout != 5*time.Second || len(res.Subsets) != 2 ||
		res.Subsets["v2"].Filter != "Service.Meta.version == v2" {
		t.Errorf("resolver: %+v", res)
	}
	sp := es["03-service-b-splitter.hcl"].(*consul.ServiceSplitterConfigEntry)
	want := []consul.ServiceSplit{{Weight: 90, ServiceSubset: "v1"}, {Weight: 10, ServiceSubset: "v2"}}
	if !reflect.DeepEqual(sp.Splits, want) {
		t.Errorf("splitter: %+v", sp.Splits)
	}
	rt := es["04-service-b-router.hcl"].(*consul.ServiceRouterConfigEntry)
	if len(rt.Routes) != 3 {
		t.Fatalf("router routes: %+v", rt.Routes)
	}
	if rt.Routes[0].Match.HTTP.PathPrefix != "/admin" || rt.Routes[0].Destination.ServiceSubset != "v2" {
		t.Errorf("route 0: %+v %+v", rt.Routes[0].Match.HTTP, rt.Routes[0].Destination)
	}
	h := rt.Routes[1].Match.HTTP.Header
	if len(h) != 1 || h[0].Name != "x-canary" || h[0].Exact != "1" {
		t.Errorf("route 1 header: %+v", h)
	}
	d := rt.Routes[2].Destination
	if d.NumRetries != 3 || !reflect.DeepEqual(d.RetryOnStatusCodes, []uint32{503}) || d.Service != "service-b" {
		t.Errorf("route 2: %+v", d)
	}
	pr := es["05-service-b-promote.json"].(*consul.ServiceSplitterConfigEntry)
	if len(pr.Splits) != 2 || pr.Splits[0].Weight != 0 || pr.Splits[1].Weight != 100 {
		t.Errorf("promote: %+v", pr.Splits)
	}
}

// The same entries spelled in snake_case, in HCL and JSON, decode to what
// the PascalCase files give.
func TestParseSnakeCase(t *testing.T) {
	es := canaryEntries(t)
	cases := []struct {
		name, src string
		want      Entry
	}{
		{"resolver.hcl", `
kind = "service-resolver"
name = "service-b"
default_subset = "v1"
connect_timeout = "5s"
subsets {
  v1 { filter = "Service.Meta.version == v1" }
  v2 { filter = "Service.Meta.version == v2" }
}`, es["02-service-b-resolver.hcl"]},
		{"splitter.json", `{"kind":"service-splitter","name":"service-b","splits":[
  {"weight":90,"service_subset":"v1"},{"weight":10,"service_subset":"v2"}]}`, es["03-service-b-splitter.hcl"]},
		{"router.hcl", `
kind = "service-router"
name = "service-b"
routes = [
  { match { http { path_prefix = "/admin" } }, destination { service_subset = "v2" } },
  { match { http { header = [{ name = "x-canary", exact = "1" }] } }, destination { service_subset = "v2" } },
  {
    match { http { path_prefix = "/" } }
    destination {
      service = "service-b"
      num_retries = 3
      retry_on_status_codes = [503]
    }
  },
]`, es["04-service-b-router.hcl"]},
		{"router-blocks.hcl", `
Kind = "service-router"
Name = "service-b"
Routes {
  Match { HTTP { PathPrefix = "/admin" } }
  Destination { ServiceSubset = "v2" }
}
Routes {
  Match { HTTP { Header { Name = "x-canary"
                          Exact = "1" } } }
  Destination { ServiceSubset = "v2" }
}
Routes {
  Match { HTTP { PathPrefix = "/" } }
  Destination {
    Service = "service-b"
    NumRetries = 3
    RetryOnStatusCodes = [503]
  }
}`, es["04-service-b-router.hcl"]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.name, []byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	src := `
kind = "Service-Resolver"
name = "web"
request_timeout = "1m30s"
load_balancer {
  policy = "ring_hash"
  ring_hash_config { minimum_ring_size = 1024, maximum_ring_size = 2048 }
  hash_policies = [
    { field = "header", field_value = "x-user", terminal = true },
    { source_ip = true },
    { field = "cookie", field_value = "s", cookie_config { ttl = "10s", path = "/" } },
  ]
}
failover = {
  "*" = { datacenters = ["dc2", "dc3"] }
}
meta { owner = "team-a" }
`
	e, err := Parse("lb.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	r := e.(*consul.ServiceResolverConfigEntry)
	lb := r.LoadBalancer
	if r.Kind != ServiceResolver || r.RequestTimeout != 90*time.Second || lb.Policy != "ring_hash" ||
		lb.RingHashConfig.MinimumRingSize != 1024 || len(lb.HashPolicies) != 3 ||
		!lb.HashPolicies[0].Terminal || !lb.HashPolicies[1].SourceIP ||
		lb.HashPolicies[2].CookieConfig.TTL != 10*time.Second || r.Meta["owner"] != "team-a" {
		t.Errorf("resolver: %+v lb %+v", r, lb)
	}
	if !reflect.DeepEqual(r.Failover["*"].Datacenters, []string{"dc2", "dc3"}) {
		t.Errorf("failover: %+v", r.Failover)
	}

	pd, err := Parse("pd.hcl", []byte("Kind = \"proxy-defaults\"\nConfig { protocol = \"HTTP\" }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(pd); err != nil {
		t.Fatal(err)
	}
	p := pd.(*consul.ProxyConfigEntry)
	if p.Name != GlobalName || p.Config["protocol"] != "http" {
		t.Errorf("proxy-defaults: %+v", p)
	}

	// JSON durations as numbers (nanoseconds), as a JSON API client may send.
	e, err = Parse("r.json", []byte(`{"Kind":"service-resolver","Name":"a","ConnectTimeout":2000000000}`))
	if err != nil || e.(*consul.ServiceResolverConfigEntry).ConnectTimeout != 2*time.Second {
		t.Errorf("numeric duration: %v %+v", err, e)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src string
		sentinel  error
		want      []string
	}{
		{"a.hcl", "Kind = \"service-router\"\nName = \"x\"\nRoutes = [ { Destination { Servce = \"y\" } } ]\n",
			ErrInvalid, []string{"a.hcl:3: ", `unknown key "Servce"`, "Routes[0].Destination"}},
		{"b.json", `{"Kind":"service-splitter","Name":"x","Splits":[{"Weight":100,"Subset":"v1"}]}`,
			ErrInvalid, []string{"b.json:1: ", `unknown key "Subset"`}},
		{"c.hcl", "Kind = \"service-resolver\"\nName = \"x\"\nConnectTimeout = \"5 seconds\"\n",
			ErrInvalid, []string{"c.hcl:3: ", "ConnectTimeout", `bad duration "5 seconds"`}},
		{"l.hcl", "Kind = \"service-splitter\"\nName = \"x\"\nSplits = [\n  { Weight = 50 },\n  { Weight = 50, Wieght = 1 },\n]\n",
			ErrInvalid, []string{"l.hcl:5: ", `Splits[1]: unknown key "Wieght"`}},
		{"m.hcl", "Kind = \"service-splitter\"\nName = \"x\"\nSplits = [\n  { Weight = \"x\" },\n  { Weight = 50 },\n]\n",
			ErrInvalid, []string{"m.hcl: ", `Splits[0].Weight: expected a number`}},
		{"d.hcl", "Kind = \"service-resolver\"\nName = \"x\"\nSubsets = {\n  v1 = {\n    Filter = \n", ErrInvalid, []string{"d.hcl:"}},
		{"e.json", "{\"Kind\": \"service-defaults\",\n \"Name\": \"x\",\n \"Protocol\": }", ErrInvalid, []string{"e.json:3:"}},
		{"f.hcl", `Kind = "mesh"` + "\nName = \"x\"\n", ErrUnknownKind, []string{"f.hcl", "mesh"}},
		{"g.hcl", `Name = "x"`, ErrInvalid, []string{"g.hcl", "missing Kind"}},
		{"h.json", `{"Kind":"service-splitter","Name":"x","Splits":[{"Weight":"lots"}]}`, ErrInvalid,
			[]string{"Splits[0].Weight", "expected a number"}},
		{"i.json", `{"Kind":"service-router","Name":"x","Routes":[{"Destination":{"NumRetries":-1}}]}`, ErrInvalid,
			[]string{"NumRetries", "non-negative integer"}},
		{"j.hcl", "Kind = \"service-resolver\"\nName = \"x\"\nDefaultSubset = \"a\"\ndefault_subset = \"b\"\n", ErrInvalid,
			[]string{"name the same field"}},
		{"k.hcl", "", ErrInvalid, []string{"k.hcl", "empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.name, []byte(c.src))
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("err = %v, want %v", err, c.sentinel)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("multi-line error: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestDecodeMap(t *testing.T) {
	e, err := Decode(map[string]any{
		"Kind": "service-splitter", "Name": "web",
		"Splits":      []any{map[string]any{"Weight": 100.0, "Service": "web2"}},
		"CreateIndex": 0.0, "ModifyIndex": 0.0,
	})
	if err != nil {
		t.Fatal(err)
	}
	sp := e.(*consul.ServiceSplitterConfigEntry)
	if sp.Name != "web" || sp.Splits[0].Service != "web2" || sp.Splits[0].Weight != 100 {
		t.Errorf("%+v", sp)
	}
}

// What the consul/api client sends (its JSON encoding) decodes back to the
// same entry: the /v1/config API stores what the client wrote.
func TestParseClientJSONRoundTrip(t *testing.T) {
	es := canaryEntries(t)
	extra := with(resolver("web", "v1"), func(r *consul.ServiceResolverConfigEntry) {
		r.RequestTimeout = 3 * time.Second
		r.LoadBalancer = &consul.LoadBalancer{Policy: "ring_hash", HashPolicies: []consul.HashPolicy{{Field: "cookie", FieldValue: "id", CookieConfig: &consul.CookieConfig{TTL: time.Minute}}}}
		r.Failover = map[string]consul.ServiceResolverFailover{"*": {Targets: []consul.ServiceResolverFailoverTarget{{Datacenter: "dc2"}}}}
	})
	es["extra"] = extra
	es["pd"] = &consul.ProxyConfigEntry{Kind: ProxyDefaults, Name: GlobalName, Config: map[string]any{"protocol": "http", "n": 1.5}}
	for name, e := range es {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(name+".json", b)
		if err != nil {
			t.Fatalf("%s: %v (%s)", name, err, b)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, e)
		}
	}
}

func TestParseHCLForms(t *testing.T) {
	src := `
Kind = "service-resolver"
Name = "web"
DefaultSubset = "v1"
Subsets "v1" { Filter = "Service.Meta.version == v1" }
Subsets "v2" {
  Filter       = "Service.Meta.version == v2"
  only_passing = "true"
}
Failover "v1" { ServiceSubset = "v2" }
`
	e, err := Parse("labels.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	r := e.(*consul.ServiceResolverConfigEntry)
	if len(r.Subsets) != 2 || !r.Subsets["v2"].OnlyPassing || r.Failover["v1"].ServiceSubset != "v2" {
		t.Errorf("labelled blocks: %+v", r)
	}

	src = `
Kind = "service-router"
Name = "web"
Routes = [{
  Match { HTTP { PathPrefix = "/api", Methods = ["get"] } }
  Destination {
    NumRetries               = "2"
    RetryOnConnectFailure    = true
    RequestTimeout           = "2s"
    PrefixRewrite            = "/"
    RequestHeaders {
      Add { "x-from" = "mesh" }
      Set = { x-version = 2 }
      Remove = ["x-debug"]
    }
    response_headers { remove = ["server"] }
  }
}]
`
	e, err = Parse("router.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	d := e.(*consul.ServiceRouterConfigEntry).Routes[0].Destination
	want := &consul.HTTPHeaderModifiers{Add: map[string]string{"x-from": "mesh"}, Set: map[string]string{"x-version": "2"}, Remove: []string{"x-debug"}}
	if d.NumRetries != 2 || !d.RetryOnConnectFailure || d.RequestTimeout != 2*time.Second ||
		!reflect.DeepEqual(d.RequestHeaders, want) || !reflect.DeepEqual(d.ResponseHeaders.Remove, []string{"server"}) {
		t.Errorf("destination %+v req %+v", d, d.RequestHeaders)
	}
	if m := e.(*consul.ServiceRouterConfigEntry).Routes[0].Match.HTTP.Methods; !reflect.DeepEqual(m, []string{"GET"}) {
		t.Errorf("methods not upper-cased: %v", m)
	}

	bad := []struct{ src, want string }{
		{"Kind = \"service-resolver\"\nName = \"x\"\nSubsets = \"v1\"\n", "Subsets: expected an object, got string"},
		{"Kind = \"service-resolver\"\nName = \"x\"\nConnectTimeout = true\n", "ConnectTimeout: expected a duration, got bool"},
		{"Kind = \"service-router\"\nName = \"x\"\nRoutes = [{ Destination { RetryOnConnectFailure = \"maybe\" } }]\n", "expected a bool"},
		{"Kind = \"service-router\"\nName = \"x\"\nRoutes = [{ Destination { NumRetries = 1.5 } }]\n", "NumRetries: expected a non-negative integer"},
		{"Kind = 3\n", "Kind: expected a string, got number 3"},
		{"Kind = \"service-splitter\"\nName = \"x\"\nSplits = [{ Weight = 100, RequestHeaders { Add { \"\" = \"v\" } } }]\n", ""},
	}
	for _, b := range bad {
		e, err := Parse("bad.hcl", []byte(b.src))
		if b.want == "" {
			if err == nil {
				err = Validate(e)
			}
			if err == nil || !strings.Contains(err.Error(), "header name is empty") {
				t.Errorf("%q: %v", b.src, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%q: error %v, want %q", b.src, err, b.want)
		}
	}
}
