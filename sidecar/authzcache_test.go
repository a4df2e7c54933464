package sidecar

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// setAuthzEpoch publishes epoch e to every backend (the RTDS resource
// meshlet's xDS server sends) and waits until each applied it.
func (m *l7Mesh) setAuthzEpoch(e string, opts l7Options) {
	m.t.Helper()
	for _, b := range m.backends {
		res := m.backendResources(b, opts)
		res[typeRuntime] = []types.Resource{&runtimev3.Runtime{Name: AuthzEpochResource,
			Layer: &structpb.Struct{Fields: map[string]*structpb.Value{AuthzEpochKey: structpb.NewStringValue(e)}}}}
		m.cp.set(b.nodeID, res)
	}
	for _, b := range m.backends {
		testutil.WaitFor(m.t, waitTimeout, b.nodeID+" at authz epoch "+e, func() bool { return b.proxy.authz.cache.current() == e })
	}
}

// TestHTTPAuthzCache: with an epoch, a pair's allow answers its later
// requests without a check; a deny intention added after the cached allow
// takes effect on the next connection at once (its network check is never
// cached) and, once the new epoch arrives, on the open connection too.
func TestHTTPAuthzCache(t *testing.T) {
	api := subsetCluster("")
	opts := l7Options{httpAuthz: true}
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("api", 0)}}, apiRoutes(clusterRoute("/", api, nil)), opts)
	b := m.backends[0]
	m.cp.authz.setEpoch("e1")
	m.setAuthzEpoch("e1", opts)
	hits := func() int64 { return statValue(t, b.proxy, "http.public_listener.ext_authz.cache_hit") }

	client := &http.Client{Timeout: waitTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	for i := 0; i < 20; i++ {
		if code, body, _, err := m.get(client, "/items"); err != nil || code != 200 || body != "api" {
			t.Fatalf("GET %d = %d %q %v", i, code, body, err)
		}
	}
	if n := m.cp.authz.httpCalls.Load(); n > 1 {
		t.Fatalf("%d HTTP checks for 20 requests of one allowed pair, want at most 1", n)
	}
	if n := hits(); n < 19 {
		t.Fatalf("cache hits = %d, want >= 19", n)
	}

	if status := httpOverTLS(t, fmt.Sprintf("127.0.0.1:%d", b.port), m.webLeaf); status != "200" {
		t.Fatalf("a direct connection with web's certificate got %q, want 200 (the probe proves nothing)", status)
	}

	// Deny web: the next connection to api (web's own certificate, straight
	// to api's public listener) is refused before the epoch moves.
	m.cp.authz.setDeny(spiffeID("web"), true)
	if status := httpOverTLS(t, fmt.Sprintf("127.0.0.1:%d", b.port), m.webLeaf); status == "200" {
		t.Fatal("a new connection after the deny was served from the cached allow")
	}

	// The new epoch empties the cache: requests are checked again.
	checks := m.cp.authz.httpCalls.Load()
	m.cp.authz.setEpoch("e2")
	m.setAuthzEpoch("e2", opts)
	before := hits()
	code, _, _, err := m.get(client, "/items")
	if err == nil && code == 200 {
		t.Fatal("a request after the new epoch was allowed from the cache")
	}
	if hits() != before {
		t.Fatal("a request after the new epoch was answered from the cache")
	}
	// Either the request was checked, or the new epoch had the open
	// connection re-checked and closed before it (reauthz.go).
	closed := statValue(t, b.proxy, "ext_authz.connect_authz.reauthorization_closed")
	if err == nil && m.cp.authz.httpCalls.Load() == checks && closed == 0 {
		t.Fatal("the request after the new epoch was neither checked nor stopped by a re-check of its connection")
	}
}

// TestHTTPAuthzWithoutEpoch: against a control plane that serves no RTDS
// epoch (go-control-plane's snapshot cache with no Runtime resource, as
// any xDS server but meshlet's own), the HTTP authorization listener warms
// and serves, and every request is checked, even when the authorization
// service marks its allows with an epoch: a deny takes effect on the next
// request of a kept-alive connection.
func TestHTTPAuthzWithoutEpoch(t *testing.T) {
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("api", 0)}}, apiRoutes(clusterRoute("/", api, nil)), l7Options{httpAuthz: true})
	b := m.backends[0]
	m.cp.authz.setEpoch("e1") // marked answers; the proxy never learns the epoch
	client := &http.Client{Timeout: waitTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	const n = 10
	for i := 0; i < n; i++ {
		if code, body, _, err := m.get(client, "/items"); err != nil || code != 200 || body != "api" {
			t.Fatalf("GET %d = %d %q %v", i, code, body, err)
		}
	}
	if calls := m.cp.authz.httpCalls.Load(); calls < n {
		t.Fatalf("%d HTTP checks for %d requests without an epoch, want one each", calls, n)
	}
	if hits := statValue(t, b.proxy, "http.public_listener.ext_authz.cache_hit"); hits != 0 {
		t.Fatalf("%d cache hits without an epoch", hits)
	}
	if e := b.proxy.authz.cache.current(); e != "" {
		t.Fatalf("proxy epoch %q from a control plane that sent none", e)
	}
	m.cp.authz.setDenyPath("/items", true)
	if code, _, _, err := m.get(client, "/items"); err != nil || code != 403 {
		t.Fatalf("GET after a deny = %d, %v; want 403 on the kept-alive connection", code, err)
	}
}

// TestAuthzCacheEpochRules: entries only in the current epoch, none
// without one, a new epoch empties the cache, drop forgets a pair.
func TestAuthzCacheEpochRules(t *testing.T) {
	var c authzCache
	k := [2]string{spiffeID("web"), spiffeID("api")}
	c.put(k, "e1")
	if c.allows(k) {
		t.Fatal("cached before any epoch arrived")
	}
	c.setEpoch("e1")
	c.put(k, "e0") // an answer from an older epoch
	if c.allows(k) {
		t.Fatal("an answer from another epoch was cached")
	}
	c.put(k, "e1")
	if !c.allows(k) {
		t.Fatal("an answer of the current epoch was not cached")
	}
	c.setEpoch("e2")
	if c.allows(k) {
		t.Fatal("an entry survived a new epoch")
	}
	c.put(k, "e2")
	c.drop(k)
	if c.allows(k) {
		t.Fatal("a dropped pair is still allowed")
	}
	c.put([2]string{"", spiffeID("api")}, "e2")
	if c.allows([2]string{"", spiffeID("api")}) {
		t.Fatal("a pair without a source identity was cached")
	}
}

// BenchmarkH1AuthzPerRequest is BenchmarkH1SteadyState with the HTTP
// ext_authz filter on api's public listener: a check per request, or the
// cached allow once the control plane has given an epoch.
func BenchmarkH1AuthzPerRequest(b *testing.B) {
	for _, cached := range []bool{false, true} {
		name := "check_each"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			app := startRawApp(b, `{"count":1}`)
			opts := l7Options{httpAuthz: true}
			m := newL7Mesh(b, []l7BackendSpec{{cluster: subsetCluster("v1"), addr: app.ln.Addr().String()}},
				apiRoutes(clusterRoute("/", subsetCluster("v1"), nil)), opts)
			if cached {
				m.cp.authz.setEpoch("e1")
				m.setAuthzEpoch("e1", opts)
			}
			runRawRequests(b, m)
		})
	}
}

// runRawRequests drives b.N keep-alive GETs through web with rawClient.
func runRawRequests(b *testing.B, m *l7Mesh) {
	cl := dialRawClient(b, m.url("")[len("http://"):],
		"GET /api/items?page=2 HTTP/1.1\r\nHost: api\r\nUser-Agent: bench\r\nAccept: */*\r\nX-User: alice\r\n\r\n")
	for i := 0; i < 50; i++ {
		if err := cl.do(); err != nil {
			b.Fatalf("warm-up request: %v", err)
		}
	}
	b.ReportAllocs()
	before := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cl.do(); err != nil {
			b.Fatalf("request %d: %v", i, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/req")
}

// httpOverTLS connects to addr presenting leaf, sends one GET and returns
// the response's status code, "" if the connection ended without one.
func httpOverTLS(t testing.TB, addr string, leaf *testLeaf) string {
	t.Helper()
	pair, err := tls.X509KeyPair([]byte(leaf.certPEM), []byte(leaf.keyPEM))
	if err != nil {
		t.Fatalf("bad test key pair: %v", err)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}) // the client side is not under test
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := c.Write([]byte("GET /items HTTP/1.1\r\nHost: api\r\n\r\n")); err != nil {
		return ""
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || len(line) < 12 {
		return ""
	}
	return line[9:12]
}
