package controlplane

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/httpsrv"
)

// browserRequest sends what a browser page sends: a simple (no preflight)
// request with its own Origin, or a request to a rebound name's Host.
func browserRequest(t *testing.T, method, url, host, origin, ctype, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// A cross-origin text/plain POST (a form or fetch from any web page) cannot
// create an intention, and a page on a rebound DNS name cannot read a
// service's private key; same-origin and header-less requests still work.
func TestConnectAPIRefusesBrowserAttacks(t *testing.T) {
	cp := startControlPlane(t)
	t.Cleanup(func() { _ = cp.Stop() })
	base := "http://" + cp.HTTPAddr()
	body := `{"SourceName":"evil","DestinationName":"db","Action":"allow"}`

	for _, tc := range []struct {
		name, origin, ctype string
		want                int
	}{
		{"cross-origin text/plain", "http://evil.example", "text/plain;charset=UTF-8", http.StatusForbidden},
		{"cross-origin json", "http://evil.example", "application/json", http.StatusForbidden},
		{"no origin, form type", "", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
	} {
		code, msg := browserRequest(t, "POST", base+"/v1/connect/intentions", "", tc.origin, tc.ctype, body)
		if code != tc.want {
			t.Errorf("%s: status %d (%s), want %d", tc.name, code, msg, tc.want)
		}
	}
	if n := len(cp.Intentions.List()); n != 0 {
		t.Fatalf("refused requests created %d intentions", n)
	}
	idx := cp.CA.Roots()
	code, msg := browserRequest(t, "GET", base+"/v1/agent/connect/ca/leaf/web", "evil.example:8500", "", "", "")
	if code != http.StatusMisdirectedRequest || strings.Contains(msg, "PRIVATE KEY") {
		t.Fatalf("rebound Host reading a leaf: status %d, body %q", code, msg)
	}
	if cp.CA.Roots().ActiveRootID != idx.ActiveRootID {
		t.Fatal("roots changed")
	}

	code, msg = browserRequest(t, "POST", base+"/v1/connect/intentions", "", base, "application/json", body)
	if code != http.StatusOK {
		t.Fatalf("same-origin POST: status %d (%s)", code, msg)
	}
	code, msg = browserRequest(t, "GET", base+"/v1/agent/connect/ca/leaf/web", "localhost:1234", "", "", "")
	if code != http.StatusOK || !strings.Contains(msg, "PrivateKeyPEM") {
		t.Fatalf("leaf over localhost: status %d", code)
	}
}

// Names and origins from the configuration are accepted.
func TestConnectAPIAllowList(t *testing.T) {
	cp, err := New(Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		HTTPPolicy: httpsrv.Policy{Hosts: []string{"mesh.internal"}, Origins: []string{"https://ui.example"}}}, catalog.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	code, msg := browserRequest(t, "GET", "http://"+cp.HTTPAddr()+"/v1/connect/intentions", "mesh.internal:8500", "https://ui.example", "", "")
	if code != http.StatusOK {
		t.Fatalf("allowed host and origin: status %d (%s)", code, msg)
	}
}
