package terminating

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/meshlet/meshlet/internal/tlsutil"
)

// jobWithCA writes input/terminating.hcl with CA_FILE set.
func jobWithCA(t *testing.T, caFile string) string {
	t.Helper()
	src, err := os.ReadFile("input/terminating.hcl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "terminating.hcl")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(src), "CA_FILE", caFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCA writes a new CA's certificate where the gateway's proxy (which
// drops to nobody) can read it, and returns the CA and the file.
func testCA(t *testing.T) (certPEM, keyPEM []byte, file string) {
	t.Helper()
	certPEM, keyPEM, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "termgw-ca")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, certPEM, 0o644); err != nil { // a CA certificate is public
		t.Fatal(err)
	}
	return certPEM, keyPEM, file
}

// tlsEcho is a TLS echo server (a certificate for legacy-tls.example from
// the test's CA) listening inside a network namespace; it records the SNI
// clients send.
type tlsEcho struct {
	mu  sync.Mutex
	sni string
}

func (e *tlsEcho) lastSNI() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sni
}

// startTLSEcho listens on addr inside the namespace at nsPath (the socket
// stays in that namespace whichever thread accepts on it).
func startTLSEcho(t *testing.T, nsPath, addr string, caPEM, caKey []byte) *tlsEcho {
	t.Helper()
	certPEM, keyPEM, err := tlsutil.GenerateCert(caPEM, caKey, tlsutil.CertOptions{Role: tlsutil.RoleServer, DNSNames: []string{"legacy-tls.example"}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	e := &tlsEcho{}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			e.mu.Lock()
			e.sni = h.ServerName
			e.mu.Unlock()
			return nil, nil
		}}
	var ln net.Listener
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		ln, err = tls.Listen("tcp", addr, cfg)
		return err
	}); err != nil {
		t.Fatalf("failed to listen in %s: %v", nsPath, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return e
}
