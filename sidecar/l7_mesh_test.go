package sidecar

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/meshlet/meshlet/internal/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// versionApp answers with its version after a short delay, so that
// requests are in flight when the configuration changes.
func versionApp(version string, delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(delay)
		fmt.Fprint(w, version)
	})
}

// outcome is one request of a load run.
type outcome struct {
	start time.Time
	code  int
	body  string
	err   error
}

// runLoad sends GETs from workers until stop is closed.
func runLoad(m *l7Mesh, workers int, stop <-chan struct{}) []outcome {
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: waitTimeout}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := outcome{start: time.Now()}
				o.code, o.body, _, o.err = m.get(client, "/")
				mu.Lock()
				out = append(out, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// The seed scenario's promotion: a 90/10 split holds its weights; changing
// it to 0/100 under load takes effect within 1 s with no failed request;
// a route to a cluster that arrives in the same update fails nothing
// either (the route waits for the cluster to warm).
func TestL7SplitPromotionUnderLoad(t *testing.T) {
	v1, v2, v3 := subsetCluster("v1"), subsetCluster("v2"), subsetCluster("v3")
	m := newL7Mesh(t, []l7BackendSpec{
		{cluster: v1, handler: versionApp("v1", 2*time.Millisecond)},
		{cluster: v2, handler: versionApp("v2", 2*time.Millisecond)},
		{cluster: v3, handler: versionApp("v3", 2*time.Millisecond)},
	}, apiRoutes(splitRoute("/", v1, 9000, v2, 1000)), l7Options{withhold: []string{v3}})

	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	counts := map[string]int{}
	const n = 1000
	for i := 0; i < n; i++ {
		code, body, _, err := m.get(client, "/")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %d = %d %q %v", i, code, body, err)
		}
		counts[body]++
	}
	if share := float64(counts["v2"]) / n; math.Abs(share-0.10) > 0.03 || counts["v3"] != 0 {
		t.Fatalf("split 90/10 gave %v", counts)
	}

	promote := func(rc *routev3.RouteConfiguration, want string) {
		t.Helper()
		stop := make(chan struct{})
		done := make(chan []outcome)
		go func() { done <- runLoad(m, 8, stop) }()
		time.Sleep(300 * time.Millisecond)
		changed := time.Now()
		m.setWeb(rc, nil)
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		res := <-done
		late, before := 0, 0
		for _, o := range res {
			if o.err != nil || o.code != http.StatusOK {
				t.Fatalf("request failed during the update: %d %q %v", o.code, o.body, o.err)
			}
			if o.start.Before(changed) {
				before++
			}
			if o.start.After(changed.Add(time.Second)) {
				late++
				if o.body != want {
					t.Fatalf("request started %v after the change went to %s, want %s", o.start.Sub(changed), o.body, want)
				}
			}
		}
		if before == 0 || late == 0 {
			t.Fatalf("load did not span the change (%d before, %d after 1s)", before, late)
		}
	}
	promote(apiRoutes(splitRoute("/", v1, 0, v2, 10000)), "v2")

	// v3's cluster was not in web's config so far: one update brings the
	// cluster and the route to it together.
	delete(m.withheld, v3)
	promote(apiRoutes(splitRoute("/", v3, 10000)), "v3")
}

// A retry policy hides an instance answering 503 to every second request;
// without it the failures show.
func TestL7RetriesHideFlakyInstance(t *testing.T) {
	var calls atomic.Int64
	flaky := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1)%2 == 0 {
			http.Error(w, "flaky", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "flaky-ok")
	})
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: flaky}, {cluster: api, handler: versionApp("steady", 0)}}, apiRoutes(clusterRoute("/", api, nil)), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	failed := 0
	for i := 0; i < 40; i++ {
		code, _, _, err := m.get(client, "/")
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("the flaky instance never failed a request without retries")
	}
	v := m.setWeb(apiRoutes(clusterRoute("/", api, func(r *routev3.Route) {
		r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "connect-failure,retriable-status-codes,5xx", RetriableStatusCodes: []uint32{503}, NumRetries: wrapperspb.UInt32(2)}
	})), nil)
	waitAccepted(t, m.web, typeRoute, v)
	retriesBefore := statValue(t, m.web, "cluster."+api+".upstream_rq_retry")
	for i := 0; i < 200; i++ {
		code, body, _, err := m.get(client, "/")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %d with retries = %d %q %v", i, code, body, err)
		}
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_rq_retry") - retriesBefore; n < 20 {
		t.Fatalf("upstream_rq_retry grew by %d, want the flaky instance's failures retried", n)
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_rq_retry_success"); n < 20 {
		t.Fatalf("upstream_rq_retry_success = %d", n)
	}
}

// Routes by header and path reach their subsets; prefix_rewrite, header
// mutations and a route timeout apply; an unmatched request is a 404.
func TestL7RoutesRewriteAndHeaders(t *testing.T) {
	echo := func(version string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				select {
				case <-time.After(2 * time.Second):
				case <-r.Context().Done():
					return
				}
			}
			w.Header().Set("X-Internal", "secret")
			fmt.Fprintf(w, "%s path=%s added=%s removed=%s original=%s", version, r.URL.Path, r.Header.Get("X-Route"), r.Header.Get("X-Strip"), r.Header.Get("X-Envoy-Original-Path"))
		})
	}
	v1, v2 := subsetCluster("v1"), subsetCluster("v2")
	canary := clusterRoute("/", v2, func(r *routev3.Route) {
		r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch("x-canary", "exact", "1", false)}
	})
	admin := splitRoute("/admin/", v2, 10000)
	admin.GetRoute().PrefixRewrite = "/internal/"
	admin.GetRoute().GetWeightedClusters().Clusters[0].RequestHeadersToAdd = headerOpts("x-route", "v2-split")
	slow := clusterRoute("/slow", v1, func(r *routev3.Route) {
		r.Match.PathSpecifier = &routev3.RouteMatch_Path{Path: "/slow"}
		r.GetRoute().Timeout = durationpbNew(300 * time.Millisecond)
	})
	posts := clusterRoute("/", v1, func(r *routev3.Route) {
		r.Match.Headers = []*routev3.HeaderMatcher{hdrMatch(":method", "regex", "GET|HEAD", false)}
		r.RequestHeadersToAdd = headerOpts("x-route", "main")
		r.RequestHeadersToRemove = []string{"x-strip"}
		r.ResponseHeadersToRemove = []string{"x-internal"}
		r.ResponseHeadersToAdd = headerOpts("x-served-by", "meshlet")
	})
	m := newL7Mesh(t, []l7BackendSpec{{cluster: v1, handler: echo("v1")}, {cluster: v2, handler: echo("v2")}}, apiRoutes(canary, admin, slow, posts), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	check := func(path string, wantCode int, wantBody string, hdr ...string) http.Header {
		t.Helper()
		code, body, h, err := m.get(client, path, hdr...)
		if err != nil || code != wantCode || !strings.Contains(body, wantBody) {
			t.Fatalf("GET %s %v = %d %q %v, want %d %q", path, hdr, code, body, err, wantCode, wantBody)
		}
		return h
	}
	check("/x", 200, "v2 path=/x", "X-Canary", "1")
	check("/admin/users?x=1", 200, "v2 path=/internal/users added=v2-split removed= original=/admin/users?x=1")
	h := check("/x", 200, "v1 path=/x added=main removed=", "X-Strip", "please")
	if h.Get("X-Internal") != "" || h.Get("X-Served-By") != "meshlet" {
		t.Fatalf("response headers %v: want X-Internal removed and X-Served-By added", h)
	}
	check("/slow", http.StatusGatewayTimeout, "upstream request timeout")
	req, _ := http.NewRequest(http.MethodPost, m.url("/x"), strings.NewReader("body"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /x (no route for POST) = %d, want 404", resp.StatusCode)
	}
}

// The HTTP ext_authz filter checks every request with Envoy's attributes
// (source principal, peer certificate, method, path, headers); a deny is
// the DeniedResponse's status, headers and body; a failed check is a 403.
func TestL7ExtAuthzPerRequest(t *testing.T) {
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("api", 0)}}, apiRoutes(clusterRoute("/", api, nil)), l7Options{httpAuthz: true})
	m.cp.authz.setDenyPath("/admin", true)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	code, body, _, err := m.get(client, "/public?x=1", "X-User", "alice")
	if err != nil || code != 200 || body != "api" {
		t.Fatalf("GET /public = %d %q %v", code, body, err)
	}
	rq := m.cp.authz.lastHTTP.Load()
	if rq == nil {
		t.Fatal("no HTTP check reached the authorization server")
	}
	attrs := rq.GetAttributes()
	hr := attrs.GetRequest().GetHttp()
	if got := attrs.GetSource().GetPrincipal(); got != spiffeID("web") {
		t.Fatalf("source.principal = %q, want %q", got, spiffeID("web"))
	}
	if got := attrs.GetDestination().GetPrincipal(); got != spiffeID("api") {
		t.Fatalf("destination.principal = %q, want %q", got, spiffeID("api"))
	}
	pemCert, err := url.QueryUnescape(attrs.GetSource().GetCertificate())
	if err != nil || !strings.Contains(pemCert, "BEGIN CERTIFICATE") {
		t.Fatalf("source.certificate = %q (%v), want the URL-encoded PEM", attrs.GetSource().GetCertificate(), err)
	}
	if hr.GetMethod() != "GET" || hr.GetPath() != "/public?x=1" || hr.GetHeaders()["x-user"] != "alice" || hr.GetHeaders()[":authority"] == "" || hr.GetHost() == "" {
		t.Fatalf("http attributes = %v", hr)
	}
	code, body, h, err := m.get(client, "/admin")
	if err != nil || code != http.StatusForbidden || !strings.Contains(body, "denied by permission 1") || h.Get("X-Denied-By") != "fake-authz" {
		t.Fatalf("GET /admin = %d %q %v %v, want the 403 DeniedResponse", code, body, h, err)
	}
	if n := statValue(t, m.backends[0].proxy, "http.public_listener.ext_authz.denied"); n != 1 {
		t.Fatalf("ext_authz.denied = %d, want 1", n)
	}
	// The authorization server is away: fail closed.
	m.cp.stop()
	code, _, _, err = m.get(client, "/public")
	if err != nil || code != http.StatusForbidden {
		t.Fatalf("GET /public with the authz server down = %d %v, want 403", code, err)
	}
}

// /config_dump has Envoy's RoutesConfigDump with the RDS configuration.
func TestL7ConfigDumpRoutes(t *testing.T) {
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("api", 0)}}, apiRoutes(clusterRoute("/", api, nil)), l7Options{})
	var dump struct {
		Configs []map[string]json.RawMessage `json:"configs"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, m.web, "/config_dump", http.StatusOK)), &dump); err != nil {
		t.Fatalf("config_dump is not JSON: %v", err)
	}
	for _, c := range dump.Configs {
		if string(c["@type"]) != `"type.googleapis.com/envoy.admin.v3.RoutesConfigDump"` {
			continue
		}
		var rd struct {
			Dynamic []struct {
				VersionInfo string `json:"version_info"`
				RouteConfig struct {
					Type         string `json:"@type"`
					Name         string `json:"name"`
					VirtualHosts []struct {
						Routes []json.RawMessage `json:"routes"`
					} `json:"virtual_hosts"`
				} `json:"route_config"`
			} `json:"dynamic_route_configs"`
		}
		raw, _ := json.Marshal(c)
		if err := json.Unmarshal(raw, &rd); err != nil {
			t.Fatalf("RoutesConfigDump: %v", err)
		}
		if len(rd.Dynamic) != 1 || rd.Dynamic[0].RouteConfig.Name != "api" || rd.Dynamic[0].VersionInfo == "" ||
			rd.Dynamic[0].RouteConfig.Type != "type.googleapis.com/envoy.config.route.v3.RouteConfiguration" ||
			len(rd.Dynamic[0].RouteConfig.VirtualHosts) != 1 || len(rd.Dynamic[0].RouteConfig.VirtualHosts[0].Routes) != 1 {
			t.Fatalf("RoutesConfigDump = %s", raw)
		}
		return
	}
	t.Fatal("config_dump has no RoutesConfigDump")
}

// An invalid route configuration is NACKed and the last good one keeps
// routing; a valid one after it is ACKed and applies.
func TestL7RouteNACKKeepsLastGood(t *testing.T) {
	v1, v2 := subsetCluster("v1"), subsetCluster("v2")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: v1, handler: versionApp("v1", 0)}, {cluster: v2, handler: versionApp("v2", 0)}}, apiRoutes(clusterRoute("/", v1, nil)), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	bad := clusterRoute("/", v2, func(r *routev3.Route) {
		r.Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "(unclosed"}}
	})
	m.setWeb(apiRoutes(bad), nil)
	testutil.WaitFor(t, waitTimeout, "web to NACK the routes", func() bool {
		for _, n := range m.cp.nacksFor(m.web.cfg.ProxyID) {
			if n.typeURL == typeRoute && strings.Contains(n.detail, "unclosed") {
				return true
			}
		}
		return false
	})
	if code, body, _, err := m.get(client, "/"); err != nil || code != 200 || body != "v1" {
		t.Fatalf("GET after the NACK = %d %q %v, want v1 (last good)", code, body, err)
	}
	v := m.setWeb(apiRoutes(clusterRoute("/", v2, nil)), nil)
	waitAccepted(t, m.web, typeRoute, v)
	if code, body, _, err := m.get(client, "/"); err != nil || code != 200 || body != "v2" {
		t.Fatalf("GET after a good update = %d %q %v, want v2", code, body, err)
	}
}

// ring_hash with a header hash policy: requests with the same header value
// reach the same instance; different values spread over both.
func TestL7RingHashStickiness(t *testing.T) {
	api := subsetCluster("")
	rc := apiRoutes(clusterRoute("/", api, func(r *routev3.Route) {
		r.GetRoute().HashPolicy = []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}}}
	}))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("a", 0)}, {cluster: api, handler: versionApp("b", 0)}}, rc, l7Options{})
	v := m.setWeb(rc, func(c *clusterv3.Cluster) { c.LbPolicy = clusterv3.Cluster_RING_HASH })
	waitAccepted(t, m.web, typeCluster, v)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	seen := map[string]bool{}
	for u := 0; u < 20; u++ {
		user := fmt.Sprintf("user-%d", u)
		_, first, _, err := m.get(client, "/", "X-User", user)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		seen[first] = true
		for i := 0; i < 5; i++ {
			if _, again, _, _ := m.get(client, "/", "X-User", user); again != first {
				t.Fatalf("%s went to %s, then %s", user, first, again)
			}
		}
	}
	if len(seen) != 2 {
		t.Fatalf("20 users all hashed to %v", seen)
	}
}

// A route configuration naming a cluster that never arrives is held (the
// previous one serves) for the warm-up timeout, then applies: requests to
// the missing cluster get 503 as in Envoy.
func TestL7RouteToMissingClusterAppliesAfterWarmTimeout(t *testing.T) {
	prev := routeWarmTimeout
	routeWarmTimeout = 500 * time.Millisecond
	t.Cleanup(func() { routeWarmTimeout = prev })
	v1 := subsetCluster("v1")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: v1, handler: versionApp("v1", 0)}}, apiRoutes(clusterRoute("/", v1, nil)), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	v := m.setWeb(apiRoutes(clusterRoute("/", "missing-cluster", nil)), nil)
	waitAccepted(t, m.web, typeRoute, v)
	if code, body, _, err := m.get(client, "/"); err != nil || code != 200 || body != "v1" {
		t.Fatalf("GET while the new routes wait for their cluster = %d %q %v, want v1", code, body, err)
	}
	testutil.WaitFor(t, waitTimeout, "the new routes to apply", func() bool {
		code, _, _, err := m.get(client, "/")
		return err == nil && code == http.StatusServiceUnavailable
	})
}

// A cookie hash policy with a ttl generates the cookie for a new client
// (Set-Cookie) so it sticks to one instance (Consul's sticky sessions).
func TestL7RingHashGeneratedCookie(t *testing.T) {
	api := subsetCluster("")
	rc := apiRoutes(clusterRoute("/", api, func(r *routev3.Route) {
		r.GetRoute().HashPolicy = []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{
			Cookie: &routev3.RouteAction_HashPolicy_Cookie{Name: "sticky", Ttl: durationpbNew(time.Hour), Path: "/"}}}}
	}))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("a", 0)}, {cluster: api, handler: versionApp("b", 0)}}, rc, l7Options{})
	v := m.setWeb(rc, func(c *clusterv3.Cluster) { c.LbPolicy = clusterv3.Cluster_MAGLEV })
	waitAccepted(t, m.web, typeCluster, v)
	// Accepted is recorded just before the runtime swaps the cluster in
	// (and a changed cluster warms first): wait until maglev is in use.
	testutil.WaitFor(t, waitTimeout, "the maglev cluster in use", func() bool {
		_, _, h, err := m.get(&http.Client{Timeout: waitTimeout}, "/")
		return err == nil && h.Get("Set-Cookie") != ""
	})
	seen := map[string]bool{}
	for c := 0; c < 20; c++ {
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Timeout: waitTimeout, Jar: jar}
		_, first, h, err := m.get(client, "/")
		if err != nil || !strings.HasPrefix(h.Get("Set-Cookie"), "sticky=") || !strings.Contains(h.Get("Set-Cookie"), "Max-Age=3600") {
			t.Fatalf("first GET: Set-Cookie %q, %v", h.Get("Set-Cookie"), err)
		}
		seen[first] = true
		for i := 0; i < 5; i++ {
			_, again, h, _ := m.get(client, "/")
			if again != first || h.Get("Set-Cookie") != "" {
				t.Fatalf("client %d went to %s, then %s (Set-Cookie %q)", c, first, again, h.Get("Set-Cookie"))
			}
		}
		client.CloseIdleConnections()
	}
	if len(seen) != 2 {
		t.Fatalf("20 clients all stuck to %v", seen)
	}
}

// per_try_timeout: an instance that hangs on every second request is
// retried on the other instance before the route timeout.
func TestL7PerTryTimeout(t *testing.T) {
	var calls atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%2 == 0 {
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "slow-ok")
	})
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: slow}, {cluster: api, handler: versionApp("fast", 0)}}, apiRoutes(clusterRoute("/", api, func(r *routev3.Route) {
		r.GetRoute().Timeout = durationpbNew(3 * time.Second)
		r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "gateway-error", NumRetries: wrapperspb.UInt32(2), PerTryTimeout: durationpbNew(200 * time.Millisecond)}
	})), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	for i := 0; i < 20; i++ {
		start := time.Now()
		code, body, _, err := m.get(client, "/")
		if err != nil || code != 200 || time.Since(start) > 2*time.Second {
			t.Fatalf("GET %d = %d %q %v after %v", i, code, body, err, time.Since(start))
		}
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_rq_per_try_timeout"); n == 0 {
		t.Fatal("no per-try timeout was counted")
	}
}
