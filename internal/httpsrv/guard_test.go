package httpsrv

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProtect(t *testing.T) {
	reached := 0
	h := Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }), Policy{
		Hosts:   []string{"10.1.2.3", "Node-1", "meshlet.internal."},
		Origins: []string{"https://ui.example:8443/"},
	})
	for _, tc := range []struct {
		name, method, host, origin, ctype string
		want                              int
	}{
		{"official client", "PUT", "127.0.0.1:4646", "", "", http.StatusOK},
		{"consul client", "PUT", "127.0.0.1:8500", "", "application/json; charset=utf-8", http.StatusOK},
		{"localhost", "GET", "localhost:4646", "", "", http.StatusOK},
		{"ipv6 loopback", "GET", "[::1]:4646", "", "", http.StatusOK},
		{"other loopback", "GET", "127.0.0.2:4646", "", "", http.StatusOK},
		{"bind address", "GET", "10.1.2.3:4646", "", "", http.StatusOK},
		{"node name", "GET", "node-1:4646", "", "", http.StatusOK},
		{"allowed name with dot", "GET", "MESHLET.internal:4646", "", "", http.StatusOK},
		{"no port", "GET", "localhost", "", "", http.StatusOK},
		{"same origin", "POST", "localhost:4646", "http://localhost:4646", "application/json", http.StatusOK},
		{"allowed origin", "POST", "localhost:4646", "https://ui.example:8443", "", http.StatusOK},
		{"DELETE without body", "DELETE", "127.0.0.1:4646", "", "", http.StatusOK},
		{"GET with form type", "GET", "127.0.0.1:4646", "", "text/plain", http.StatusOK},

		{"rebound name", "GET", "evil.example:4646", "", "", http.StatusMisdirectedRequest},
		{"other address", "GET", "10.9.9.9:4646", "", "", http.StatusMisdirectedRequest},
		{"name suffix", "GET", "node-1.evil.example", "", "", http.StatusMisdirectedRequest},
		{"cross origin", "POST", "127.0.0.1:4646", "http://evil.example", "", http.StatusForbidden},
		{"cross origin GET", "GET", "127.0.0.1:4646", "http://evil.example", "", http.StatusForbidden},
		{"other port", "POST", "127.0.0.1:4646", "http://127.0.0.1:8080", "", http.StatusForbidden},
		{"null origin", "POST", "127.0.0.1:4646", "null", "", http.StatusForbidden},
		{"text/plain", "POST", "127.0.0.1:4646", "", "text/plain", http.StatusUnsupportedMediaType},
		{"form", "PUT", "127.0.0.1:4646", "", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"multipart", "POST", "127.0.0.1:4646", "", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"DELETE text", "DELETE", "127.0.0.1:4646", "", "text/plain;charset=UTF-8", http.StatusUnsupportedMediaType},
		{"bad type", "POST", "127.0.0.1:4646", "", ";;", http.StatusUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached
			r := httptest.NewRequest(tc.method, "/v1/jobs", strings.NewReader(`{}`))
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.want)
			}
			if passed := reached > before; passed != (tc.want == http.StatusOK) {
				t.Fatalf("handler reached: %v with status %d", passed, w.Code)
			}
			if tc.want != http.StatusOK && strings.Count(strings.TrimSpace(w.Body.String()), "\n") != 0 {
				t.Fatalf("refusal is not one line: %q", w.Body.String())
			}
		})
	}
}

// A listener on an unspecified address accepts, as Host, the address each
// request came in on, whatever the host's addresses were at start (one
// added later by DHCP was refused until a restart), and no other.
func TestProtectUnspecifiedBind(t *testing.T) {
	h := Protect(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Policy{Hosts: []string{"0.0.0.0", "::"}})
	local := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4646}
	for _, tc := range []struct {
		host  string
		local net.Addr
		want  int
	}{
		{"192.0.2.7:4646", local, http.StatusOK},
		{"192.0.2.8:4646", local, http.StatusMisdirectedRequest},
		{"192.0.2.7:4646", nil, http.StatusMisdirectedRequest},
		{"0.0.0.0:4646", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4646}, http.StatusMisdirectedRequest},
		{"evil.example", local, http.StatusMisdirectedRequest},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tc.local))
		}
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Host %s on local address %v: %d, want %d", tc.host, tc.local, w.Code, tc.want)
		}
	}
}

// localIP reads the address a real connection was accepted on.
func TestLocalIPOfRealConnection(t *testing.T) {
	got := make(chan net.IP, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- localIP(r) }))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if ip := <-got; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("local IP %v, want 127.0.0.1", ip)
	}
}
