package ingress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// meshRoots is the mesh CA's trusted roots, from the agent's API.
func meshRoots(t *testing.T, a *framework.Agent) (*x509.CertPool, string) {
	t.Helper()
	roots, _, err := a.Consul().Agent().ConnectCARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCertPEM))
	}
	return pool, roots.ActiveRootID
}

// httpsGet sends GET / over TLS with sni as the server name (verified
// against roots) and host as the Host header; it returns the status, body
// and the certificate the gateway presented.
func httpsGet(addr, sni, host string, roots *x509.CertPool) (int, string, *x509.Certificate, error) {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{ServerName: sni, RootCAs: roots}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Host = host
	resp, err := (&http.Client{Timeout: 3 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.TLS.PeerCertificates[0], err
}

// echoTLS sends a line over TLS (versions lo..hi, suites as given, nil:
// Go's) to the tcp listener.
func echoTLS(addr, sni string, roots *x509.CertPool, lo, hi uint16, suites []uint16) (bool, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: sni, RootCAs: roots, MinVersion: lo, MaxVersion: hi, CipherSuites: suites})
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintln(c, "hello tls"); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(line) == "hello tls", nil
}

func tlsJob(t *testing.T, httpsPort, tcpPort int) string {
	t.Helper()
	src, err := os.ReadFile("input/ingress-tls.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(src), "HTTPS_PORT", strconv.Itoa(httpsPort))
	s = strings.ReplaceAll(s, "TLS_TCP_PORT", strconv.Itoa(tcpPort))
	path := filepath.Join(t.TempDir(), "ingress-tls.hcl")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestIngressTLS: HTTPS from the host's loopback to an ingress gateway
// serving a mesh CA certificate with Consul's DNS SANs, chosen by SNI and
// routed by Host; a listener that only speaks TLS 1.3 refuses TLS 1.2; a
// CA root rotation gives the gateway a certificate from the new root.
func TestIngressTLS(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	httpsPort, tcpPort := testutil.FreePort(t), testutil.FreePort(t)
	job := a.RunJob(tlsJob(t, httpsPort, tcpPort))
	a.RunningAllocs(job, 2)
	httpsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpsPort))
	tcpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort))
	roots, oldRoot := meshRoots(t, a)

	var cert *x509.Certificate
	a.Eventually(60*time.Second, "web over HTTPS by host web.example.com", func() bool {
		code, body, c, err := httpsGet(httpsAddr, "web.example.com", "web.example.com", roots)
		cert = c
		return err == nil && code == http.StatusOK && body == "web"
	})
	for _, want := range []string{"*.ingress.consul", "*.ingress.dc1.consul", "web.example.com", "web.ingress.consul"} {
		if !slices.Contains(cert.DNSNames, want) {
			t.Errorf("gateway certificate DNS SANs %v lack %q", cert.DNSNames, want)
		}
	}
	if len(cert.URIs) != 1 || !strings.HasSuffix(cert.URIs[0].String(), "/svc/ingress-tls") {
		t.Errorf("gateway certificate URI SANs = %v", cert.URIs)
	}
	// A name under the wildcard SAN; routing still goes by Host, and the
	// default names are not routed when hosts are listed (Consul's rule).
	if code, body, _, err := httpsGet(httpsAddr, "web.ingress.dc1.consul", "web.ingress.consul", roots); err != nil || code != http.StatusOK || body != "web" {
		t.Fatalf("web.ingress.consul over HTTPS with SNI web.ingress.dc1.consul: %d %q %v", code, body, err)
	}
	if code, _, _, err := httpsGet(httpsAddr, "web.ingress.dc1.consul", "web.ingress.dc1.consul", roots); err != nil || code != http.StatusNotFound {
		t.Fatalf("an unlisted host over HTTPS: %d %v, want 404", code, err)
	}
	// A name the certificate does not cover fails verification.
	if _, _, _, err := httpsGet(httpsAddr, "other.example.org", "web.example.com", roots); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a name outside the certificate: %v, want a verification error", err)
	}
	// Plain HTTP on the TLS listener is refused.
	if code, _, err := getHost(httpsAddr, "web.example.com"); err == nil && code == http.StatusOK {
		t.Fatal("plaintext HTTP answered on the TLS listener")
	}

	a.Eventually(30*time.Second, "echo over TLS 1.2 through the tcp listener", func() bool {
		ok, _ := echoTLS(tcpAddr, "db.ingress.consul", roots, tls.VersionTLS12, tls.VersionTLS12, nil)
		return ok
	})
	// A TLS 1.2 client offering only a suite outside cipher_suites.
	chacha := []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
	if ok, err := echoTLS(tcpAddr, "db.ingress.consul", roots, tls.VersionTLS12, tls.VersionTLS12, chacha); ok || err == nil {
		t.Fatalf("TLS 1.2 with a suite outside cipher_suites: ok=%v err=%v, want a refused handshake", ok, err)
	}
	t.Run("listener tls from config write", func(t *testing.T) { checkListenerTLS(t, a, tcpAddr, httpsPort, tcpPort, roots) })
	t.Run("rotation", func(t *testing.T) { checkTLSRotation(t, a, httpsAddr, oldRoot) })
}

// checkTLSRotation rotates the CA root and waits until the gateway serves
// a certificate from the new root, still with its DNS SANs.
func checkTLSRotation(t *testing.T, a *framework.Agent, addr, oldRoot string) {
	cfg := a.MustCLI("connect", "ca", "get-config")
	path := filepath.Join(t.TempDir(), "ca.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a.MustCLI("connect", "ca", "set-config", "-config-file", path)
	var active *x509.CertPool
	a.Eventually(30*time.Second, "a new active root", func() bool {
		var id string
		active, id = activeRoot(t, a)
		return id != oldRoot
	})
	a.Eventually(60*time.Second, "the gateway's certificate from the new root", func() bool {
		all, _ := meshRoots(t, a)
		code, _, c, err := httpsGet(addr, "web.example.com", "web.example.com", all)
		if err != nil || code != http.StatusOK || !slices.Contains(c.DNSNames, "*.ingress.consul") {
			return false
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: active, DNSName: "web.example.com"})
		return err == nil
	})
}

// activeRoot is a pool of the mesh CA's active root alone, and its ID.
func activeRoot(t *testing.T, a *framework.Agent) (*x509.CertPool, string) {
	t.Helper()
	roots, _, err := a.Consul().Agent().ConnectCARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		if r.ID == roots.ActiveRootID {
			pool.AppendCertsFromPEM([]byte(r.RootCertPEM))
		}
	}
	return pool, roots.ActiveRootID
}

// checkListenerTLS rewrites the gateway's ingress-gateway entry with a tls
// block on the tcp listener (Consul's per-listener TLS, which Nomad's
// jobspec lacks): TLS 1.3 only there, so TLS 1.2 is refused while the http
// listener keeps the gateway's settings.
func checkListenerTLS(t *testing.T, a *framework.Agent, tcpAddr string, httpsPort, tcpPort int, roots *x509.CertPool) {
	entry := fmt.Sprintf(`{"Kind": "ingress-gateway", "Name": "ingress-tls",
  "TLS": {"Enabled": true, "TLSMinVersion": "TLSv1_2"},
  "Listeners": [
    {"Port": %d, "Protocol": "http", "Services": [{"Name": "web", "Hosts": ["web.example.com", "web.ingress.consul"]}],
     "TLS": {"CipherSuites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]}},
    {"Port": %d, "Protocol": "tcp", "Services": [{"Name": "db"}], "TLS": {"TLSMinVersion": "TLSv1_3"}}
  ]}`, httpsPort, tcpPort)
	if r := a.CLIStdin([]byte(entry), "config", "write", "-"); r.Code != 0 {
		t.Fatalf("config write: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	a.Eventually(30*time.Second, "TLS 1.2 refused by the tcp listener", func() bool {
		ok, err := echoTLS(tcpAddr, "db.ingress.consul", roots, tls.VersionTLS12, tls.VersionTLS12, nil)
		return !ok && err != nil
	})
	if ok, err := echoTLS(tcpAddr, "db.ingress.consul", roots, tls.VersionTLS13, tls.VersionTLS13, nil); !ok {
		t.Fatalf("TLS 1.3 to the tcp listener: %v", err)
	}
	httpsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpsPort))
	if code, body, _, err := httpsGet(httpsAddr, "web.example.com", "web.example.com", roots); err != nil || code != http.StatusOK || body != "web" {
		t.Fatalf("web over HTTPS after the listener's tls changed: %d %q %v", code, body, err)
	}
	// An entry Consul would refuse is refused, and nothing changes.
	bad := strings.Replace(entry, `"TLSMinVersion": "TLSv1_3"`, `"TLSMinVersion": "TLSv1_3", "CipherSuites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]`, 1)
	if r := a.CLIStdin([]byte(bad), "config", "write", "-"); r.Code == 0 || !strings.Contains(r.Stderr+r.Stdout, "TLS 1.2 or earlier") {
		t.Fatalf("config write of cipher suites with TLS 1.3: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
}
