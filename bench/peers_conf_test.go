package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testLayout(t *testing.T) peerLayout {
	t.Helper()
	dir := t.TempDir()
	certs, err := writePeerCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := peerLayout{Dir: dir, Certs: certs, ServerIP: "127.0.0.1", HTTP: 18001, Conn: 18002, Bulk: 18003,
		SrvHTTP: 18101, SrvConn: 18102, SrvBulk: 18103, AppHTTP: 9001, AppBulk: 5201, StreamModule: nginxStreamModule()}
	for _, side := range []string{"client", "server"} {
		if err := os.MkdirAll(l.sideDir(side), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestPeerConfContents(t *testing.T) {
	l := testLayout(t)
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"nginx client", nginxConf(l, "client"), []string{"worker_processes 1;", "master_process off;", "listen 127.0.0.1:18001;",
			"proxy_pass https://mesh;", "proxy_ssl_verify on;", "proxy_ssl_protocols TLSv1.3;", "Ciphersuites TLS_AES_128_GCM_SHA256",
			"proxy_set_header Connection \"\";", "keepalive 64;", "proxy_pass 127.0.0.1:18102;", "proxy_ssl on;"}},
		{"nginx server", nginxConf(l, "server"), []string{"listen 127.0.0.1:18101 ssl;", "ssl_verify_client on;",
			"server 127.0.0.1:9001;", "proxy_pass 127.0.0.1:5201;", "ssl_session_tickets off;"}},
		{"haproxy client", haproxyConf(l, "client"), []string{"nbthread 1", "http-reuse always", "bind 127.0.0.1:18001",
			"verify required verifyhost " + peerServerName, "ssl-min-ver TLSv1.3", "ciphersuites TLS_AES_128_GCM_SHA256", "no-ssl-reuse"}},
		{"haproxy server", haproxyConf(l, "server"), []string{"bind 127.0.0.1:18101 ssl crt", "ca-file", "verify required",
			"server s1 127.0.0.1:9001", "server s1 127.0.0.1:5201", "no-tls-tickets"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.conf, w) {
				t.Errorf("%s: missing %q in:\n%s", tc.name, w, tc.conf)
			}
		}
	}
}

// TestPeerConfValid has nginx -t and haproxy -c check the generated
// configurations (and the certificates they name), one subtest per proxy
// and side; a proxy that is not installed skips its subtests.
func TestPeerConfValid(t *testing.T) {
	l := testLayout(t)
	for _, p := range []*peerProxy{newNginx(l), newHAProxy(l)} {
		for _, side := range []string{"client", "server"} {
			t.Run(p.name+"/"+side, func(t *testing.T) {
				if _, err := exec.LookPath(p.bin); err != nil {
					t.Skipf("%s is not installed, so its %s config is not checked (scripts/bench.sh installs it): %v", p.bin, side, err)
				}
				path, err := p.writeConf(side)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, p.bin, p.checkArgs(path, side)...).CombinedOutput()
				if err != nil {
					conf, _ := os.ReadFile(path)
					t.Errorf("%s %s config invalid: %v\n%s\n%s", p.name, side, err, out, conf)
				}
			})
		}
	}
}

func TestPeerCerts(t *testing.T) {
	l := testLayout(t)
	for _, f := range []string{l.Certs.CA, l.Certs.ServerBundle, l.Certs.ClientKey} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(l.Certs.CA)
	pool.AppendCertsFromPEM(caPEM)
	for _, c := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{l.Certs.ServerCert, l.Certs.ServerKey, x509.ExtKeyUsageServerAuth}, {l.Certs.ClientCert, l.Certs.ClientKey, x509.ExtKeyUsageClientAuth}} {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(c.cert), err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
			t.Errorf("%s: key is %T, want ECDSA", filepath.Base(c.cert), leaf.PublicKey)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s does not verify against the bench CA: %v", filepath.Base(c.cert), err)
		}
	}
}
