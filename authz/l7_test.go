package authz

import (
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/meshlet/meshlet/intention"
)

func httpRequest(src, dst, method, path string, headers map[string]string) *authv3.CheckRequest {
	req := request(src, dst)
	h := map[string]string{":method": method, ":path": path}
	for k, v := range headers {
		h[k] = v
	}
	req.Attributes.Request = &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Method: method, Path: path, Headers: h,
	}}
	return req
}

// An L7 intention is evaluated request by request over the real gRPC
// ext_authz service; connections are admitted only to HTTP destinations.
func TestL7IntentionOverGRPC(t *testing.T) {
	f := newFixture(t, false)
	if _, err := f.ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Permissions: []*intention.Permission{
		{Action: "deny", HTTP: &intention.HTTPPermission{PathPrefix: "/admin"}},
		{Action: "allow", HTTP: &intention.HTTPPermission{PathPrefix: "/", Methods: []string{"GET"}}},
	}}, true); err != nil {
		t.Fatal(err)
	}
	id := f.ca.SpiffeID
	// Without a protocol lookup the destination counts as tcp: refused.
	if ok, reason := f.check(t, request(id("web"), id("api"))); ok || !strings.Contains(reason, "needs destination \"api\" to have protocol http") {
		t.Fatalf("connection to a tcp destination = %v, %q; want refused", ok, reason)
	}
	f.svc.SetProtocols(func(s string) string {
		if s == "api" {
			return "http"
		}
		return "tcp"
	})
	if ok, _ := f.check(t, request(id("web"), id("api"))); !ok {
		t.Fatal("connection to an http destination refused; want admitted")
	}
	if d, err := f.svc.Authorize(id("web"), "api"); err != nil || !d.Allowed || !strings.Contains(d.Reason, "per-request") {
		t.Fatalf("Authorize = %+v, %v; want admitted for per-request checks", d, err)
	}
	cases := []struct {
		method, path string
		allowed      bool
		reason       string
	}{
		{"GET", "/admin/x?y=1", false, "denied by permission 1 of intention web => api (2 permissions)"},
		{"GET", "/items?page=2", true, ""},
		{"DELETE", "/items", false, "no permission of intention web => api (2 permissions) matches DELETE /items"},
	}
	for _, c := range cases {
		ok, reason := f.check(t, httpRequest(id("web"), id("api"), c.method, c.path, nil))
		if ok != c.allowed || !strings.Contains(reason, c.reason) {
			t.Errorf("%s %s = %v, %q; want %v, %q", c.method, c.path, ok, reason, c.allowed, c.reason)
		}
	}
	// An L4 intention answers requests as it answers connections.
	f.upsert(t, "db", "api", "allow")
	if ok, _ := f.check(t, httpRequest(id("db"), id("api"), "POST", "/admin", nil)); !ok {
		t.Fatal("L4 allow intention refused a request")
	}
	if d, _ := f.svc.AuthorizeRequest(id("web"), "api", intention.Request{Method: "GET", Path: "/x"}); !d.Allowed || !strings.Contains(d.Reason, "allowed by permission 2 of intention web => api") {
		t.Fatalf("AuthorizeRequest reason = %q", d.Reason)
	}
	d, err := f.svc.AuthorizeRequest(id("web"), "api", intention.Request{Method: "GET", Path: "/admin"})
	if err != nil || d.Allowed || d.Permission != 0 || d.Matched == nil {
		t.Fatalf("AuthorizeRequest = %+v, %v; want denied by permission 0", d, err)
	}
}
