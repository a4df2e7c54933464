package command

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// `connect proxy -concurrency` rejects a negative thread count before
// contacting anything: with or without -service, the catalog is never asked.
func TestConnectProxyConcurrencyFlag(t *testing.T) {
	var hits atomic.Int32
	catalog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	defer catalog.Close()
	t.Setenv("MESHLET_CONNECT_ADDR", catalog.URL)
	for _, args := range [][]string{
		{"-proxy-id", "web-sidecar-proxy", "-service", "web"},
		{"-proxy-id", "web-sidecar-proxy"},
		{"-sidecar-for", "web-1"},
	} {
		r := runCLI(t, "", append(append([]string{"connect", "proxy"}, args...), "-concurrency", "-1")...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code == 0 || first != "Error: -concurrency must be 0 or more" {
			t.Errorf("%v: code %d stderr %q", args, r.code, r.stderr)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the catalog was asked %d times", n)
	}
}
