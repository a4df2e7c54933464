package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func strMatch(kind, v string) *matcherv3.StringMatcher {
	m := &matcherv3.StringMatcher{}
	switch kind {
	case "exact":
		m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: v}
	case "prefix":
		m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: v}
	case "suffix":
		m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: v}
	case "regex":
		m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}
	}
	return m
}

func hdrMatch(name, kind, v string, invert bool) *routev3.HeaderMatcher {
	h := &routev3.HeaderMatcher{Name: name, InvertMatch: invert}
	if kind == "present" {
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
	} else {
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: strMatch(kind, v)}
	}
	return h
}

func testRequest(method, target, host string, hdr ...string) *http.Request {
	u, _ := url.ParseRequestURI(target)
	r := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}, RequestURI: target}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

// A router in the shape the xDS server emits for a service-router: every
// matcher kind, first match wins, no match is no route.
func TestRouteMatchingKinds(t *testing.T) {
	rt := func(c string, m *routev3.RouteMatch) *routev3.Route {
		return &routev3.Route{Match: m, Action: clusterAction(c)}
	}
	prefix := func(p string) *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: p}}
	}
	withHeaders := func(m *routev3.RouteMatch, h ...*routev3.HeaderMatcher) *routev3.RouteMatch {
		m.Headers = h
		return m
	}
	rc, err := decodeRouteConfig(&routev3.RouteConfiguration{Name: "api", VirtualHosts: []*routev3.VirtualHost{{
		Name: "api", Domains: []string{"*"}, Routes: []*routev3.Route{
			rt("exact", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/admin"}}),
			rt("regex", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/items/[0-9]+"}}}),
			rt("method", withHeaders(prefix("/m"), hdrMatch(":method", "regex", "PUT|DELETE", false))),
			rt("canary", withHeaders(prefix("/"), hdrMatch("x-canary", "exact", "1", false))),
			rt("hprefix", withHeaders(prefix("/"), hdrMatch("x-user", "prefix", "adm", false))),
			rt("hsuffix", withHeaders(prefix("/"), hdrMatch("x-user", "suffix", "@corp", false))),
			rt("present", withHeaders(prefix("/"), hdrMatch("x-debug", "present", "", false))),
			rt("invert", withHeaders(prefix("/inv"), hdrMatch("x-env", "exact", "prod", true))),
			rt("authority", withHeaders(prefix("/"), hdrMatch(":authority", "exact", "special.example", false))),
			rt("pathhdr", withHeaders(prefix("/"), hdrMatch(":path", "suffix", "?raw=1", false))),
			rt("query", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, QueryParameters: []*routev3.QueryParameterMatcher{
				{Name: "version", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: strMatch("exact", "2")}},
				{Name: "beta", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}},
			}}),
			rt("api", prefix("/api/")),
		},
	}}})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	cases := []struct {
		req  *http.Request
		want string
	}{
		{testRequest("GET", "/admin", "h"), "exact"},
		{testRequest("GET", "/admin/x", "h"), ""},
		{testRequest("GET", "/items/42", "h"), "regex"},
		{testRequest("GET", "/items/4x", "h"), ""},
		{testRequest("DELETE", "/m/1", "h"), "method"},
		{testRequest("GET", "/m/1", "h"), ""},
		{testRequest("GET", "/x", "h", "X-Canary", "1"), "canary"},
		{testRequest("GET", "/x", "h", "X-Canary", "2"), ""},
		{testRequest("GET", "/x", "h", "X-User", "admin"), "hprefix"},
		{testRequest("GET", "/x", "h", "X-User", "bob@corp"), "hsuffix"},
		{testRequest("GET", "/x", "h", "X-Debug", ""), "present"},
		{testRequest("GET", "/inv", "h", "X-Env", "dev"), "invert"},
		{testRequest("GET", "/inv", "h"), ""}, // absent: never matches a value matcher, inverted or not (Envoy)
		{testRequest("GET", "/inv", "h", "X-Env", "prod"), ""},
		{testRequest("GET", "/", "special.example"), "authority"},
		{testRequest("GET", "/p?raw=1", "h"), "pathhdr"},
		{testRequest("GET", "/q?version=2&beta", "h"), "query"},
		{testRequest("GET", "/q?version=2", "h"), ""},
		{testRequest("GET", "/q?a=1&versio%6E=%32&beta=&version=3", "h"), "query"}, // decoded; the first value counts
		{testRequest("GET", "/q?version=3&beta=1", "h"), ""},
		{testRequest("GET", "/api/v1", "h", "X-Canary", "1"), "canary"}, // first match wins
		{testRequest("GET", "/api/v1", "h"), "api"},
	}
	for _, tc := range cases {
		got := ""
		if r := rc.match(&reqView{req: tc.req, scheme: "http"}); r != nil {
			got = r.clusters[0].name
		}
		if got != tc.want {
			t.Errorf("%s %s (host %s, headers %v) -> %q, want %q", tc.req.Method, tc.req.RequestURI, tc.req.Host, tc.req.Header, got, tc.want)
		}
	}
}

// Weighted clusters are picked in proportion to their integer weights.
func TestWeightedClusterSplit(t *testing.T) {
	cs := []weightedCluster{{name: "v1", weight: 9000}, {name: "v2", weight: 1000}}
	counts := map[string]int{}
	const n = 100000
	for i := 0; i < n; i++ {
		counts[pickWeighted(cs)]++
	}
	if share := float64(counts["v2"]) / n; math.Abs(share-0.1) > 0.01 {
		t.Fatalf("v2 share = %.3f, want 0.10 ± 0.01 (%v)", share, counts)
	}
	r, err := decodeRoute(&routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
			Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "v1", Weight: wrapperspb.UInt32(0)}, {Name: "v2", Weight: wrapperspb.UInt32(10000)}},
		}}}}})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	for i := 0; i < 1000; i++ {
		if c := pickWeighted(r.clusters); c != "v2" {
			t.Fatalf("a weight-0 cluster was picked: %s", c)
		}
	}
}

func TestRetryPolicyConditions(t *testing.T) {
	decode := func(on string, codes ...uint32) *retryPolicy {
		t.Helper()
		rp, err := decodeRetryPolicy(&routev3.RetryPolicy{RetryOn: on, RetriableStatusCodes: codes})
		if err != nil {
			t.Fatalf("decode %q: %v", on, err)
		}
		return rp
	}
	if rp := decode("5xx"); rp.numRetries != 1 {
		t.Fatalf("num_retries default = %d, want 1", rp.numRetries)
	}
	if _, err := decodeRetryPolicy(&routev3.RetryPolicy{RetryOn: "5xx,bogus"}); err == nil {
		t.Fatal("an unknown retry_on was accepted")
	}
	get := testRequest("GET", "/", "h")
	post := testRequest("POST", "/", "h")
	post.Body = keepOpenBody{http.NoBody}
	keyed := testRequest("POST", "/", "h", "Idempotency-Key", "k1")
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	connErr := &connectError{addr: "x", err: errors.New("refused")}
	refused := fmt.Errorf("%w: %w: reset", errStaleConn, errNothingWritten)
	reset := errors.New("connection reset by peer")
	perTry := fmt.Errorf("%w: %w", errPerTryTimeout, context.DeadlineExceeded)
	cases := []struct {
		name string
		rp   *retryPolicy
		req  *http.Request
		resp *http.Response
		err  error
		want bool
	}{
		{"5xx on 503", decode("5xx"), get, resp(503), nil, true},
		{"5xx on 500", decode("5xx"), get, resp(500), nil, true},
		{"5xx not on 404", decode("5xx"), get, resp(404), nil, false},
		{"5xx on reset", decode("5xx"), get, nil, reset, true},
		{"5xx on connect failure", decode("5xx"), get, nil, connErr, true},
		{"gateway-error on 502", decode("gateway-error"), get, resp(502), nil, true},
		{"gateway-error not on 500", decode("gateway-error"), get, resp(500), nil, false},
		{"connect-failure", decode("connect-failure"), get, nil, connErr, true},
		{"connect-failure not on 503", decode("connect-failure"), get, resp(503), nil, false},
		{"connect-failure not on reset", decode("connect-failure"), get, nil, reset, false},
		{"retriable codes", decode("retriable-status-codes", 409), get, resp(409), nil, true},
		{"retriable codes other", decode("retriable-status-codes", 409), get, resp(503), nil, false},
		{"reset", decode("reset"), get, nil, reset, true},
		{"refused-stream", decode("refused-stream"), get, nil, refused, true},
		{"no healthy upstream", decode("5xx"), get, nil, ErrNoHealthyUpstream, false},
		{"POST with body not on 503", decode("5xx"), post, resp(503), nil, false},
		{"POST with body not on reset", decode("5xx,reset"), post, nil, reset, false},
		{"POST with body on connect failure", decode("connect-failure"), post, nil, connErr, true},
		{"POST with idempotency key on 503", decode("5xx"), keyed, resp(503), nil, true},
		{"retriable-4xx on 409", decode("retriable-4xx"), get, resp(409), nil, true},
		{"retriable-4xx not on 404", decode("retriable-4xx"), get, resp(404), nil, false},
		{"per-try timeout under gateway-error", decode("gateway-error"), get, nil, perTry, true},
		{"per-try timeout under 5xx", decode("5xx"), get, nil, perTry, true},
		{"per-try timeout not under connect-failure", decode("connect-failure"), get, nil, perTry, false},
		{"per-try timeout of a POST with body", decode("5xx"), post, nil, perTry, false},
	}
	for _, tc := range cases {
		if got := shouldRetry(tc.req, tc.rp, tc.resp, tc.err); got != tc.want {
			t.Errorf("%s: shouldRetry = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHeaderMutations(t *testing.T) {
	opt := func(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: a}
	}
	m, err := decodeHeaderMutation([]*corev3.HeaderValueOption{
		opt("x-add", "b", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
		opt("x-set", "new", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
		opt("x-absent", "v", corev3.HeaderValueOption_ADD_IF_ABSENT),
		opt("x-present", "v", corev3.HeaderValueOption_ADD_IF_ABSENT),
		opt("x-only-if", "v", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
		{Header: &corev3.HeaderValue{Key: "x-legacy", Value: "set"}, Append: wrapperspb.Bool(false)},
	}, []string{"x-secret"})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	h := http.Header{"X-Add": {"a"}, "X-Set": {"old"}, "X-Present": {"keep"}, "X-Secret": {"s"}, "X-Legacy": {"l1", "l2"}}
	m.apply(h)
	want := http.Header{"X-Add": {"a", "b"}, "X-Set": {"new"}, "X-Absent": {"v"}, "X-Present": {"keep"}, "X-Legacy": {"set"}}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("headers = %v, want %v", h, want)
	}
	if _, err := decodeHeaderMutation(nil, []string{":path"}); err == nil {
		t.Fatal("removing a pseudo header was accepted")
	}
}

func lbCluster(lb lbPolicy, n int) (*cluster, *clusterState) {
	c := &cluster{}
	st := &clusterState{cfg: &clusterConfig{lb: lb}}
	var g []*host
	for i := 0; i < n; i++ {
		g = append(g, &host{ep: endpoint{addr: fmt.Sprintf("10.0.0.%d:443", i+1), weight: 1, healthy: true}, stats: &hostStats{}})
	}
	st.hosts, st.healthy = g, [][]*host{g}
	if lb == lbRingHash {
		st.buildRings()
	}
	return c, st
}

// ring_hash: one key always lands on the same host, keys spread over all
// hosts, and removing a host moves only the keys it had.
func TestRingHashConsistency(t *testing.T) {
	c, st := lbCluster(lbRingHash, 4)
	owner := map[string]string{}
	perHost := map[string]int{}
	for i := 0; i < 2000; i++ {
		key := fmt.Sprintf("user-%d", i)
		lbc := lbContext{hash: hashString(key), hasHash: true}
		first := c.candidates(st, lbc, nil)[0].ep.addr
		for j := 0; j < 3; j++ {
			if again := c.candidates(st, lbc, nil)[0].ep.addr; again != first {
				t.Fatalf("key %s moved from %s to %s", key, first, again)
			}
		}
		owner[key] = first
		perHost[first]++
	}
	for addr, n := range perHost {
		if n < 2000/4/2 {
			t.Errorf("host %s got %d of 2000 keys: poor spread %v", addr, n, perHost)
		}
	}
	c2, st2 := lbCluster(lbRingHash, 4)
	st2.healthy = [][]*host{st2.hosts[:3]} // 10.0.0.4 leaves
	st2.buildRings()
	moved := 0
	for key, was := range owner {
		now := c2.candidates(st2, lbContext{hash: hashString(key), hasHash: true}, nil)[0].ep.addr
		if was != "10.0.0.4:443" && now != was {
			moved++
		}
	}
	if moved > 0 {
		t.Fatalf("%d keys of remaining hosts moved when a host left", moved)
	}
}

// least_request picks the less busy of two random hosts; a retry's
// candidates put the hosts already tried last.
func TestLeastRequestAndRetryHostSelection(t *testing.T) {
	c, st := lbCluster(lbLeastRequest, 2)
	st.hosts[0].stats.rqActive.Store(50)
	picks := map[string]int{}
	for i := 0; i < 1000; i++ {
		picks[c.candidates(st, lbContext{}, nil)[0].ep.addr]++
	}
	// The busy host wins only when both random choices are it (1/4).
	if busy := picks["10.0.0.1:443"]; busy > 350 {
		t.Fatalf("busy host picked %d of 1000 times: %v", busy, picks)
	}
	rr, rst := lbCluster(lbRoundRobin, 3)
	for i := 0; i < 30; i++ {
		first := rr.candidates(rst, lbContext{}, nil)[0]
		next := rr.candidates(rst, lbContext{}, []*host{first})
		if next[0] == first || next[len(next)-1] != first || len(next) != 3 {
			t.Fatalf("retry candidates %v after %v", addrsOf(next), first.ep.addr)
		}
	}
}

// round_robin with a failover priority (a second healthy group) still
// takes turns over every host of the first: each pick advances the
// rotation once, whatever the number of groups.
func TestRoundRobinWithFailoverPriority(t *testing.T) {
	c, st := lbCluster(lbRoundRobin, 4)
	var p1 []*host
	for i := 0; i < 2; i++ {
		p1 = append(p1, &host{ep: endpoint{addr: fmt.Sprintf("10.0.1.%d:443", i+1), weight: 1, healthy: true, priority: 1}, stats: &hostStats{}})
	}
	st.hosts = append(st.hosts, p1...)
	st.healthy = append(st.healthy, p1)
	picks := map[string]int{}
	for i := 0; i < 40; i++ {
		picks[c.candidates(st, lbContext{}, nil)[0].ep.addr]++
	}
	for _, h := range st.healthy[0] {
		if n := picks[h.ep.addr]; n != 10 {
			t.Fatalf("priority 0 host %s picked first %d of 40 times, want 10: %v", h.ep.addr, n, picks)
		}
	}
}

func addrsOf(hs []*host) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ep.addr)
	}
	return strings.Join(out, ",")
}

// A request whose RDS configuration has not arrived waits for it (up to
// the limit) instead of failing.
func TestRouteStoreWait(t *testing.T) {
	var rs routeStore
	rs.replace(map[string]*routeConfig{})
	got := make(chan *routeConfig, 1)
	go func() { got <- rs.wait(context.Background(), "api", 5*time.Second) }()
	time.Sleep(50 * time.Millisecond)
	rs.replace(map[string]*routeConfig{"other": {name: "other"}})
	want := &routeConfig{name: "api"}
	rs.replace(map[string]*routeConfig{"api": want})
	select {
	case rc := <-got:
		if rc != want {
			t.Fatalf("wait returned %v", rc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not see the published configuration")
	}
	start := time.Now()
	if rc := rs.wait(context.Background(), "missing", 100*time.Millisecond); rc != nil || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("wait for a missing configuration = %v after %v", rc, time.Since(start))
	}
}
