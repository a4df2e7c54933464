package command

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// `connect proxy -plain-io` runs the built-in proxy on the fallback data
// path (documented net.Conn I/O only) and says so.
func TestConnectProxyPlainIOFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Nothing listens at the xDS address: the proxy starts and waits for
	// its control plane until the context ends.
	stdout, stderr, done := startCLI(ctx, "connect", "proxy", "-plain-io", "-proxy-id", "web-sidecar-proxy", "-service", "web",
		"-grpc-addr", "127.0.0.1:1", "-admin-bind", "127.0.0.1:0")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "plain I/O") {
		select {
		case code := <-done:
			t.Fatalf("proxy exited %d: %s %s", code, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plain I/O banner after 10s: %q", stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}
