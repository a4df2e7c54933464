package consulapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

type fixture struct {
	cat    *catalog.Catalog
	ca     *ca.Manager
	ix     *intention.Store
	url    string
	client *consul.Client
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	m, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ix, err := intention.New("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.New()
	srv := NewServer(Deps{
		Catalog: cat, CA: m, Intentions: ix, Authz: authz.New(m, ix, nil, nil),
		Datacenter: "dc1", NodeName: "node-1",
	}, hclog.NewNullLogger(), opts...)
	hs := httptest.NewServer(srv.Handler()) // listens on 127.0.0.1:0
	t.Cleanup(hs.Close)
	client, err := consul.NewClient(&consul.Config{Address: hs.Listener.Addr().String(), Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{cat: cat, ca: m, ix: ix, url: hs.URL, client: client}
}

func (f *fixture) registerWeb() {
	f.cat.Register(catalog.ServiceInstance{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 8080, Tags: []string{"v1", "blue"}, NodeID: "n1", Healthy: true, Connect: true})
	f.cat.Register(catalog.ServiceInstance{ID: "web-2", Name: "web", Address: "10.0.0.2", Port: 8080, Tags: []string{"v2"}, NodeID: "n1", Healthy: true, Connect: true})
	f.cat.Register(catalog.ServiceInstance{ID: "db-1", Name: "db", Address: "10.0.0.3", Port: 5432, NodeID: "n1", Healthy: true})
}

func (f *fixture) registerProxy(id, dst string, port int, healthy bool) {
	f.cat.Register(catalog.ServiceInstance{
		ID: id, Name: dst + "-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: "10.0.0.1", Port: port,
		NodeID: "n1", Healthy: healthy,
		Proxy: &catalog.Proxy{
			DestinationServiceName: dst, DestinationServiceID: dst + "-1", LocalServiceAddress: "127.0.0.1", LocalServicePort: 8080,
			Upstreams: []catalog.Upstream{{DestinationName: "db", LocalBindAddress: "127.0.0.1", LocalBindPort: 9191}},
			Expose:    []catalog.ExposePath{{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: 21500}},
		},
	})
}

func TestCatalog(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	f.registerProxy("web-1-sidecar-proxy", "web", 21000, true)

	services, meta, err := f.client.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"web": {"blue", "v1", "v2"}, "db": {}, "web-sidecar-proxy": {}}
	if !reflect.DeepEqual(services, want) {
		t.Errorf("Services = %v, want %v", services, want)
	}
	if meta.LastIndex != f.cat.Index() || !meta.KnownLeader {
		t.Errorf("query meta = %+v, want index %d", meta, f.cat.Index())
	}

	web, _, err := f.client.Catalog().Service("web", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(web) != 2 || web[0].ServiceID != "web-1" || web[0].ServiceAddress != "10.0.0.1" || web[0].ServicePort != 8080 ||
		web[0].Node != "node-1" || web[0].Datacenter != "dc1" || !reflect.DeepEqual(web[0].ServiceTags, []string{"v1", "blue"}) {
		t.Fatalf("Catalog().Service(web) = %+v", web)
	}
	tagged, _, err := f.client.Catalog().Service("web", "v2", nil)
	if err != nil || len(tagged) != 1 || tagged[0].ServiceID != "web-2" {
		t.Fatalf("tag filter: %+v, %v", tagged, err)
	}
	none, _, err := f.client.Catalog().Service("nope", "", nil)
	if err != nil || len(none) != 0 {
		t.Fatalf("unknown service: %+v, %v", none, err)
	}
}

func TestHealthConnect(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	f.registerProxy("web-1-sidecar-proxy", "web", 21000, true)
	f.registerProxy("web-2-sidecar-proxy", "web", 21001, false)

	entries, meta, err := f.client.Health().Connect("web", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("want 2 connect endpoints, got %d", len(entries))
	}
	e := entries[0]
	if e.Service.Kind != consul.ServiceKindConnectProxy || e.Service.ID != "web-1-sidecar-proxy" || e.Service.Port != 21000 ||
		e.Service.Proxy == nil || e.Service.Proxy.DestinationServiceName != "web" || len(e.Service.Proxy.Upstreams) != 1 ||
		e.Service.Proxy.Upstreams[0].LocalBindPort != 9191 || len(e.Service.Proxy.Expose.Paths) != 1 {
		t.Fatalf("entry service = %+v (proxy %+v)", e.Service, e.Service.Proxy)
	}
	if e.Node == nil || e.Node.Node != "node-1" || e.Checks.AggregatedStatus() != consul.HealthPassing {
		t.Fatalf("entry node/checks = %+v / %v", e.Node, e.Checks.AggregatedStatus())
	}
	if entries[1].Checks.AggregatedStatus() != consul.HealthCritical {
		t.Fatalf("unhealthy proxy aggregated status = %s", entries[1].Checks.AggregatedStatus())
	}
	passing, _, err := f.client.Health().Connect("web", "", true, nil)
	if err != nil || len(passing) != 1 || passing[0].Service.ID != "web-1-sidecar-proxy" {
		t.Fatalf("passing only: %+v, %v", passing, err)
	}
	app, _, err := f.client.Health().Service("web", "", true, nil)
	if err != nil || len(app) != 2 || app[0].Service.Kind != "" {
		t.Fatalf("health service: %+v, %v", app, err)
	}

	// A blocking query returns once the catalog changes.
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		es, _, err := f.client.Health().Connect("web", "", false, &consul.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute})
		done <- result{len(es), err}
	}()
	f.registerProxy("web-3-sidecar-proxy", "web", 21002, true)
	select {
	case r := <-done:
		if r.err != nil || r.n != 3 {
			t.Fatalf("blocking query: %d entries, %v", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocking query did not return after a catalog change")
	}
}

func TestIntentions(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow, Description: "web reads db"}, nil); err != nil {
		t.Fatalf("IntentionUpsert: %v", err)
	}
	got, _, err := conn.IntentionGetExact("web", "db", nil)
	if err != nil || got == nil {
		t.Fatalf("IntentionGetExact: %+v, %v", got, err)
	}
	if got.ID == "" || got.Action != consul.IntentionActionAllow || got.Precedence != 9 || got.SourceNS != "default" ||
		got.SourceType != consul.IntentionSourceConsul || got.Description != "web reads db" || got.CreatedAt.IsZero() {
		t.Fatalf("intention = %+v", got)
	}
	// Upsert replaces in place.
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceNS: "default", SourceName: "web", DestinationNS: "default", DestinationName: "db", Action: consul.IntentionActionDeny}, nil); err != nil {
		t.Fatal(err)
	}
	again, _, _ := conn.IntentionGetExact("web", "db", nil)
	if again.ID != got.ID || again.Action != consul.IntentionActionDeny {
		t.Fatalf("upsert did not replace: %+v", again)
	}
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "*", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatal(err)
	}

	checks := []struct {
		src, dst string
		want     bool
	}{{"web", "db", false}, {"api", "db", true}, {"api", "cache", false}}
	for _, c := range checks {
		allowed, _, err := conn.IntentionCheck(&consul.IntentionCheck{Source: c.src, Destination: c.dst}, nil)
		if err != nil || allowed != c.want {
			t.Errorf("IntentionCheck(%s, %s) = %v, %v; want %v", c.src, c.dst, allowed, err, c.want)
		}
	}

	match, _, err := conn.IntentionMatch(&consul.IntentionMatch{By: consul.IntentionMatchDestination, Names: []string{"db", "cache"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(match["db"]) != 2 || match["db"][0].SourceName != "web" || match["db"][1].SourceName != "*" || len(match["cache"]) != 0 {
		t.Fatalf("IntentionMatch = %+v", match)
	}

	list, meta, err := conn.Intentions(nil)
	if err != nil || len(list) != 2 || meta.LastIndex != f.ix.Index() {
		t.Fatalf("Intentions: %d, %v (index %d)", len(list), err, meta.LastIndex)
	}
	if _, err := conn.IntentionDeleteExact("web", "db", nil); err != nil {
		t.Fatal(err)
	}
	if gone, _, err := conn.IntentionGetExact("web", "db", nil); err != nil || gone != nil {
		t.Fatalf("after delete: %+v, %v", gone, err)
	}
	if len(f.ix.List()) != 1 {
		t.Fatalf("store has %d intentions, want 1", len(f.ix.List()))
	}
}

func statusCode(err error) int {
	var se consul.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func TestInvalidRequestsChangeNothing(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatal(err)
	}
	before, index := f.ix.List(), f.ix.Index()
	bad := []*consul.Intention{
		{SourceName: "web*", DestinationName: "db", Action: consul.IntentionActionAllow},
		{SourceName: "web", DestinationName: "db", Action: "maybe"},
		{SourceName: "web", DestinationName: "db", Permissions: []*consul.IntentionPermission{{Action: consul.IntentionActionAllow}}},
		{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow, SourceNS: "team"},
	}
	for _, in := range bad {
		if _, err := conn.IntentionUpsert(in, nil); statusCode(err) != http.StatusBadRequest {
			t.Errorf("IntentionUpsert(%+v) = %v, want 400", in, err)
		}
	}
	raw := []struct {
		method, path, body string
		code               int
	}{
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", "{not json", 400},
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", `{"Action":"deny"} {}`, 400},
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", `{"Action":"deny"}}`, 400},
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", `{"Action":"deny"}]`, 400},
		{"POST", "/v1/connect/intentions", `{"SourceName":"x","DestinationName":"y","Action":"allow"}]`, 400},
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", `{"SourceName":"api","Action":"deny"}`, 400},
		{"PUT", "/v1/connect/intentions/exact?destination=db", `{"Action":"deny"}`, 400},
		{"POST", "/v1/connect/intentions", `{"ID":"x","SourceName":"a","DestinationName":"b","Action":"allow"}`, 400},
		{"POST", "/v1/agent/connect/authorize", `{"Target":"db","ClientCertURI":"not-a-uri"}`, 400},
		{"POST", "/v1/agent/connect/authorize", `{"Target":"db"}`, 400},
		{"GET", "/v1/connect/intentions/match?by=sideways&name=db", "", 400},
		{"GET", "/v1/connect/intentions/check?source=web", "", 400},
		{"GET", "/v1/connect/intentions?index=abc", "", 400},
		{"GET", "/v1/connect/intentions/exact?source=a/b/c/d&destination=db", "", 400},
		{"PUT", "/v1/connect/intentions/exact?source=web&destination=db", `{"Action":"deny","Description":"` + strings.Repeat("x", maxBody) + `"}`, 413},
		// Only the default namespace exists: a name in another one is not
		// answered for the same name in the default namespace.
		{"GET", "/v1/connect/intentions/exact?source=other/web&destination=db", "", 400},
		{"GET", "/v1/connect/intentions/check?source=other/web&destination=db", "", 400},
		{"DELETE", "/v1/connect/intentions/exact?source=web&destination=default/other/db", "", 400},
		{"GET", "/v1/agent/connect/ca/leaf/bad*name", "", 400},
		{"GET", "/v1/no/such/endpoint", "", 404},
		{"PATCH", "/v1/connect/intentions/exact", "", 405},
	}
	for _, c := range raw {
		code, body := do(t, c.method, f.url+c.path, c.body)
		if code != c.code {
			t.Errorf("%s %s = %d %q, want %d", c.method, c.path, code, body, c.code)
		}
		if code == 400 && (strings.Count(strings.TrimSpace(body), "\n") != 0 || body == "") {
			t.Errorf("%s %s: error body is not one line: %q", c.method, c.path, body)
		}
	}
	if !reflect.DeepEqual(f.ix.List(), before) || f.ix.Index() != index {
		t.Fatalf("rejected requests changed the intentions")
	}
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestCARootsAndLeaf(t *testing.T) {
	f := newFixture(t)
	roots, meta, err := f.client.Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	if roots.TrustDomain != f.ca.TrustDomain() || len(roots.Roots) != 1 || !roots.Roots[0].Active ||
		roots.ActiveRootID != roots.Roots[0].ID || meta.LastIndex == 0 {
		t.Fatalf("CARoots = %+v (index %d)", roots, meta.LastIndex)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(roots.Roots[0].RootCertPEM)) {
		t.Fatal("root PEM does not parse")
	}
	for _, path := range []string{"/v1/connect/ca/roots", "/v1/agent/connect/ca/roots"} {
		_, body := do(t, "GET", f.url+path, "")
		if strings.Contains(body, "PRIVATE") || strings.Contains(body, "PrivateKey\"") {
			t.Fatalf("%s leaks key material: %s", path, body)
		}
	}

	leaf, _, err := f.client.Agent().ConnectCALeaf("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Service != "web" || leaf.ServiceURI != f.ca.SpiffeID("web") || leaf.ModifyIndex == 0 || !leaf.ValidBefore.After(time.Now()) {
		t.Fatalf("leaf = %+v", leaf)
	}
	pair, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatalf("leaf cert and key do not match: %v", err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil || cert.URIs[0].String() != leaf.ServiceURI {
		t.Fatalf("leaf does not verify against CARoots: %v", err)
	}

	// A sidecar's instance ID resolves to the service it fronts.
	f.registerProxy("web-1-sidecar-proxy", "web", 21000, true)
	byProxy, _, err := f.client.Agent().ConnectCALeaf("web-1-sidecar-proxy", nil)
	if err != nil || byProxy.Service != "web" || byProxy.SerialNumber != leaf.SerialNumber {
		t.Fatalf("leaf by proxy ID = %+v, %v", byProxy, err)
	}

	// An external registration cannot shadow a service name with its ID:
	// the name is the service's, and an external instance's ID is never
	// resolved (whoever has node write picks it).
	shadow := &consul.CatalogRegistration{Node: "ext", Address: "192.0.2.9", Service: &consul.AgentService{ID: "web", Service: "evil", Port: 80}}
	if _, err := f.client.Catalog().Register(shadow, nil); err != nil {
		t.Fatal(err)
	}
	if l, _, err := f.client.Agent().ConnectCALeaf("web", nil); err != nil || l.Service != "web" {
		t.Fatalf("leaf of web after an external ID \"web\" was registered = %+v, %v; want web's", l, err)
	}
	byExt := &consul.CatalogRegistration{Node: "ext", Address: "192.0.2.9", Service: &consul.AgentService{ID: "legacy-1", Service: "evil", Port: 80}}
	if _, err := f.client.Catalog().Register(byExt, nil); err != nil {
		t.Fatal(err)
	}
	if l, _, err := f.client.Agent().ConnectCALeaf("legacy-1", nil); err != nil || l.Service != "legacy-1" {
		t.Fatalf("leaf for an external instance's ID = %+v, %v; want the name taken as a service name", l, err)
	}

	// A blocking leaf query returns once the leaf is re-issued (rotation).
	done := make(chan *consul.LeafCert, 1)
	go func() {
		l, _, err := f.client.Agent().ConnectCALeaf("web", &consul.QueryOptions{WaitIndex: leaf.ModifyIndex, WaitTime: time.Minute})
		if err != nil {
			l = nil
		}
		done <- l
	}()
	if err := f.ca.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-done:
		if l == nil || l.SerialNumber == leaf.SerialNumber || l.ModifyIndex <= leaf.ModifyIndex {
			t.Fatalf("blocking leaf query returned %+v", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocking leaf query did not return after rotation")
	}
	after, _, err := f.client.Connect().CARoots(nil)
	if err != nil || len(after.Roots) != 2 || after.ActiveRootID == roots.ActiveRootID {
		t.Fatalf("roots after rotation: %+v, %v", after, err)
	}
}

func TestAgentAuthorize(t *testing.T) {
	f := newFixture(t)
	if _, err := f.ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: "allow"}, false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		uri, target string
		want        bool
		reason      string
	}{
		{f.ca.SpiffeID("web"), "db", true, "web => db (allow)"},
		{f.ca.SpiffeID("api"), "db", false, "default policy"},
		{"spiffe://other.meshlet/ns/default/dc/dc1/svc/web", "db", false, "foreign trust domain"},
	}
	for _, c := range cases {
		got, err := f.client.Agent().ConnectAuthorize(&consul.AgentAuthorizeParams{Target: c.target, ClientCertURI: c.uri})
		if err != nil {
			t.Fatalf("ConnectAuthorize(%s): %v", c.uri, err)
		}
		if got.Authorized != c.want || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("ConnectAuthorize(%s -> %s) = %+v, want %v with %q", c.uri, c.target, got, c.want, c.reason)
		}
	}
	if _, err := f.client.Agent().ConnectAuthorize(&consul.AgentAuthorizeParams{Target: "db", ClientCertURI: "web"}); statusCode(err) != http.StatusBadRequest {
		t.Fatalf("malformed URI: %v", err)
	}
}
