package sidecar

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
)

// A request target with a #fragment is refused with 400, as Envoy does by
// default, over HTTP/1.1 (the connection then closes) and HTTP/2, and
// reaches neither ext_authz's view nor the app; an escaped '#' (%23) is
// plain data and goes through.
func TestHTTPMeshFragmentRefused(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
	}))
	for _, target := range []string{"/a#frag", "/a?x=1#frag", "/a#", "/#/admin"} {
		c, br := rawConn(t, m)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api\r\n\r\n", target)
		resp, _ := readResp(t, br, http.MethodGet)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("HTTP/1.1 %s: answered %d, want 400", target, resp.StatusCode)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("HTTP/1.1 %s: read after the answer = %v, want EOF", target, err)
		}
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	for _, target := range []string{"/a#frag", "/a?x=1#frag", "/a%23b"} {
		req := &http.Request{Method: http.MethodGet, Host: "api", Header: http.Header{},
			URL: &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", m.webPort), Opaque: target}}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("HTTP/2 %s: %v", target, err)
		}
		resp.Body.Close()
		want := http.StatusBadRequest
		if target == "/a%23b" {
			want = http.StatusOK
		}
		if resp.ProtoMajor != 2 || resp.StatusCode != want {
			t.Errorf("HTTP/2 %s: answered HTTP/%d %d, want HTTP/2 %d", target, resp.ProtoMajor, resp.StatusCode, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "/a%23b" {
		t.Fatalf("app got %q, want only /a%%23b", seen)
	}
}
