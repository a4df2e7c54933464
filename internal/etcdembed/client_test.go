package etcdembed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/internal/tlsutil"
)

func TestConnect(t *testing.T) {
	m := start(t, memberConfig(t, "m1"))
	lg, _ := testLogger(t)

	c, err := Connect(ctxT(t, 10*time.Second), ClientConfig{Endpoints: m.ClientURLs(), Logger: lg})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer c.Close()
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.Put(ctx, "/meshlet/external", "yes"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, err := m.Client().Get(ctx, "/meshlet/external")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "yes" {
		t.Fatalf("Get through the member = %v, %v", got, err)
	}
	ms, err := Members(ctx, c)
	if err != nil || len(ms) != 1 || !ms[0].IsLeader || ms[0].Name != "m1" {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
}

func TestConnectDeadEndpoint(t *testing.T) {
	lg, _ := testLogger(t)
	ep := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	checkUnreachable(t, ClientConfig{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: lg})
}

// checkUnreachable checks Connect fails with ErrUnreachable within about
// its timeout, naming the endpoints on one line.
func checkUnreachable(t *testing.T, cfg ClientConfig) {
	t.Helper()
	begin := time.Now()
	c, err := Connect(ctxT(t, 10*time.Second), cfg)
	if err == nil {
		c.Close()
		t.Fatal("Connect succeeded")
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Connect: err = %v, want ErrUnreachable", err)
	}
	if took := time.Since(begin); took > cfg.DialTimeout+2*time.Second {
		t.Errorf("Connect took %s with a %s timeout", took, cfg.DialTimeout)
	}
	if !strings.Contains(err.Error(), cfg.Endpoints[0]) {
		t.Errorf("error %q does not name the endpoint", err)
	}
	checkOneLine(t, err)
}

// testPKI writes a CA, a server certificate (server and client usages,
// SAN 127.0.0.1) and a client-only certificate into dir.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caCert, caKey, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := tlsutil.GenerateCert(caCert, caKey, tlsutil.CertOptions{Role: tlsutil.RoleServer, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cliCert, cliKey, err := tlsutil.GenerateCert(caCert, caKey, tlsutil.CertOptions{Role: tlsutil.RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{
		ca:         filepath.Join(dir, "ca.pem"),
		serverCert: filepath.Join(dir, "server.pem"),
		serverKey:  filepath.Join(dir, "server-key.pem"),
		clientCert: filepath.Join(dir, "client.pem"),
		clientKey:  filepath.Join(dir, "client-key.pem"),
	}
	for path, data := range map[string][]byte{p.ca: caCert, p.serverCert: srvCert, p.serverKey: srvKey, p.clientCert: cliCert, p.clientKey: cliKey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p testPKI) server() *TLSFiles {
	return &TLSFiles{CAFile: p.ca, CertFile: p.serverCert, KeyFile: p.serverKey}
}

func TestClientTLS(t *testing.T) {
	pki := newTestPKI(t)
	cfg := memberConfig(t, "m1")
	cfg.ClientURL = strings.Replace(cfg.ClientURL, "http:", "https:", 1)
	cfg.ClientTLS = pki.server()
	m := start(t, cfg)
	lg, _ := testLogger(t)

	c, err := Connect(ctxT(t, 10*time.Second), ClientConfig{
		Endpoints: m.ClientURLs(),
		TLS:       &TLSFiles{CAFile: pki.ca, CertFile: pki.clientCert, KeyFile: pki.clientKey},
		Logger:    lg,
	})
	if err != nil {
		t.Fatalf("Connect with a client certificate: %v", err)
	}
	defer c.Close()
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.Put(ctx, "/meshlet/tls", "yes"); err != nil {
		t.Fatalf("Put over TLS: %v", err)
	}
	// The in-process client needs no certificate.
	if got, err := m.Client().Get(ctx, "/meshlet/tls"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("Get through the in-process client = %v, %v", got, err)
	}

	t.Run("plain HTTP", func(t *testing.T) {
		plain := strings.Replace(cfg.ClientURL, "https:", "http:", 1)
		checkUnreachable(t, ClientConfig{Endpoints: []string{plain}, DialTimeout: time.Second, Logger: lg})
	})
	t.Run("no client certificate", func(t *testing.T) {
		checkUnreachable(t, ClientConfig{Endpoints: m.ClientURLs(), TLS: &TLSFiles{CAFile: pki.ca}, DialTimeout: time.Second, Logger: lg})
	})
	t.Run("unknown CA", func(t *testing.T) {
		other := newTestPKI(t)
		checkUnreachable(t, ClientConfig{
			Endpoints:   m.ClientURLs(),
			TLS:         &TLSFiles{CAFile: other.ca, CertFile: other.clientCert, KeyFile: other.clientKey},
			DialTimeout: time.Second,
			Logger:      lg,
		})
	})
}
