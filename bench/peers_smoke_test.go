package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TestPeerPairsSmoke runs each peer pair in two throwaway namespaces (the
// client side in A, the server side in B forwarding to an app on B's
// 127.0.0.1) and sends a few hundred requests through it: HTTP over one
// kept-alive connection, and one request per connection through the L4
// service. Needs root and the peer binaries.
func TestPeerPairsSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces)")
	}
	n, err := newMeshNet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.teardown)
	nsA, err := n.AddHost("a", 2)
	if err != nil {
		t.Fatal(err)
	}
	nsB, err := n.AddHost("b", 3)
	if err != nil {
		t.Fatal(err)
	}
	appPort := serveAppIn(t, NetnsPath(nsB))
	base := testLayout(t)
	base.ServerIP, base.AppHTTP, base.AppBulk = n.Addr(3), appPort, appPort
	for _, p := range []*peerProxy{newHAProxy(base), newNginx(base)} {
		t.Run(p.name, func(t *testing.T) {
			if _, err := exec.LookPath(p.bin); err != nil {
				t.Skipf("skipping: %s is not installed (scripts/bench.sh installs it)", p.bin)
			}
			p.layout.Dir = t.TempDir()
			if err := p.start(nsA, nsB); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.stop)
			if got := len(p.procs()); got != 2 {
				t.Fatalf("%d processes, want 2 (client and server side)", got)
			}
			client := nsHTTPClient(NetnsPath(nsA))
			getN(t, client, p.HTTPURL(), 300)
			single := nsHTTPClient(NetnsPath(nsA))
			single.Transport.(*http.Transport).DisableKeepAlives = true
			getN(t, single, p.ConnURL(), 50)
			noCert := nsHTTPClient(NetnsPath(nsA))
			noCert.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: caPool(t, base.Certs.CA), ServerName: peerServerName}
			if err := get(context.Background(), noCert, fmt.Sprintf("https://%s:%d/", base.ServerIP, base.SrvHTTP)); err == nil {
				t.Errorf("%s's server side answered a client without a certificate", p.name)
			}
		})
	}
}

func caPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return pool
}

// serveAppIn serves "ok" on 127.0.0.1 of the namespace at path: the
// listener is made inside it (ns.WithNetNSPath, on a locked thread) and
// served from here; the socket stays in its namespace.
func serveAppIn(t *testing.T, path string) int {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// getN waits (10 s at most) for the first answer, then sends count GETs,
// each of which must answer 200 "ok".
func getN(t *testing.T, c *http.Client, url string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = get(ctx, c, url); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("no answer through %s: %v", url, last)
	}
	for i := 0; i < count; i++ {
		if err := get(ctx, c, url); err != nil {
			t.Fatalf("request %d of %d through %s: %v", i+1, count, url, err)
		}
	}
}

func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
		return fmt.Errorf("answer %d %q", resp.StatusCode, b)
	}
	return nil
}
