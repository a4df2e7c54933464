package sidecar

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// The path handling of Envoy's normalize_path (RFC 3986 dot segments,
// unreserved escapes decoded, backslashes as slashes), merge_slashes and
// path_with_escaped_slashes_action, in Envoy's order.
func TestPathNorm(t *testing.T) {
	std := pathNorm{normalize: true, merge: true}
	for _, c := range []struct {
		n    pathNorm
		in   string
		want string
		v    pathVerdict
	}{
		{std, "/admin", "/admin", pathKeep},
		{std, "/./admin", "/admin", pathKeep},
		{std, "/x/../admin", "/admin", pathKeep},
		{std, "/../../admin", "/admin", pathKeep},
		{std, "/%61dmin", "/admin", pathKeep},
		{std, "/%2e%2E/admin", "/admin", pathKeep},
		{std, "//admin", "/admin", pathKeep},
		{std, "/a///b//", "/a/b/", pathKeep},
		{std, `/a\..\admin`, "/admin", pathKeep},
		{std, "/a/b/.", "/a/b/", pathKeep},
		{std, "/a/b/..", "/a/", pathKeep},
		{std, "/a%20b/%3f", "/a%20b/%3f", pathKeep},
		{std, "/a%2fb", "/a%2fb", pathKeep}, // escaped slashes kept by default
		{pathNorm{}, "/x/../admin", "/x/../admin", pathKeep},
		{pathNorm{merge: true}, "/x//../admin", "/x/../admin", pathKeep},
		{pathNorm{normalize: true, escaped: hcmv3.HttpConnectionManager_REJECT_REQUEST}, "/a%2Fb", "/a%2Fb", pathReject},
		{pathNorm{normalize: true, escaped: hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD}, "/admin%2f..%2Fx", "/x", pathKeep},
		{pathNorm{escaped: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT}, "/a%5Cb", `/a\b`, pathRedirect},
	} {
		got, v := c.n.path(c.in)
		if got != c.want || v != c.v {
			t.Errorf("%+v.path(%q) = %q, %d; want %q, %d", c.n, c.in, got, v, c.want, c.v)
		}
	}
}

// apply reads the path as the client sent it: a literal backslash (which
// URL.EscapedPath turns into %5C) is a slash to normalization, and the
// request's URL and RequestURI carry the result.
func TestPathNormApplyOnRawRequest(t *testing.T) {
	for _, c := range []struct{ line, wantURI, wantPath string }{
		{"GET /a\\..\\admin?q=1 HTTP/1.1", "/admin?q=1", "/admin"},
		{"GET /x/%2e%2e/%61dmin%3f HTTP/1.1", "/admin%3f", "/admin?"},
		{"GET /plain HTTP/1.1", "/plain", "/plain"},
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(c.line + "\r\nHost: api\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		if v := (pathNorm{normalize: true, merge: true}).apply(req); v != pathKeep || req.RequestURI != c.wantURI || req.URL.Path != c.wantPath || req.URL.RequestURI() != c.wantURI {
			t.Errorf("%s: verdict %d, RequestURI %q, URL.Path %q, URL.RequestURI %q; want %q, %q", c.line, v, req.RequestURI, req.URL.Path, req.URL.RequestURI(), c.wantURI, c.wantPath)
		}
	}
}

// L7 intentions judge the path the app will see: with the public
// listener's normalization (meshlet's xDS sets it), a deny on /admin holds
// for every spelling of /admin, and the app receives the normalized path.
func TestL7DenyHoldsForEverySpellingOfAPath(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2"}[h2], func(t *testing.T) { testL7DenyEverySpelling(t, h2) })
	}
}

func testL7DenyEverySpelling(t *testing.T, h2 bool) {
	api := subsetCluster("")
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.RequestURI)) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true) // h2c, as the h2 mesh's apps speak
	app := &http.Server{Handler: echo, Protocols: &protos, ReadHeaderTimeout: waitTimeout}
	go func() { _ = app.Serve(ln) }()
	t.Cleanup(func() { _ = app.Close() })
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, addr: ln.Addr().String()}}, apiRoutes(clusterRoute("/", api, nil)),
		l7Options{httpAuthz: true, normalize: true, h2: h2})
	m.cp.authz.setDenyPath("/admin", true)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	for _, p := range []string{"/admin", "//admin", "/./admin", "/x/../admin", "/%61dmin", "/%2e/admin"} {
		if code, body, _, err := m.get(client, p); err != nil || code != http.StatusForbidden {
			t.Errorf("GET %s = %d %q %v; want 403 (a spelling of /admin)", p, code, body, err)
		}
	}
	if code, body, _, err := m.get(client, "/a/./b/../c//d?x=/../y"); err != nil || code != 200 || body != "/a/c/d?x=/../y" {
		t.Fatalf("GET /a/./b/../c//d?x=/../y = %d %q %v; want the app to see /a/c/d?x=/../y", code, body, err)
	}
}
