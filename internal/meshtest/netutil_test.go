package meshtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/sidecar"
	"github.com/meshlet/meshlet/xds"
)

// lineConn is a client connection speaking lines.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(addr string) (*lineConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("failed to dial %s: %w", addr, err)
	}
	return &lineConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// readLine reads one line (without "\n") within the hang guard.
func (c *lineConn) readLine() (string, error) {
	if err := c.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

// roundTrip sends msg and checks that it is echoed. Safe to call from a
// helper goroutine (it never fails the test itself).
func (c *lineConn) roundTrip(msg string) error {
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return fmt.Errorf("failed to write %q: %w", msg, err)
	}
	got, err := c.readLine()
	if err != nil {
		return fmt.Errorf("failed to read the echo of %q: %w", msg, err)
	}
	if got != msg {
		return fmt.Errorf("echo of %q is %q", msg, got)
	}
	return nil
}

// exchange is roundTrip that fails the test.
func (c *lineConn) exchange(t testing.TB, msg string) {
	t.Helper()
	if err := c.roundTrip(msg); err != nil {
		t.Fatal(err)
	}
}

// expectClosed writes msg and expects the connection to be closed with no
// byte coming back (a timeout is not a close).
func (c *lineConn) expectClosed(msg string) error {
	_, _ = io.WriteString(c, msg+"\n") // may already fail: the peer is gone
	got, err := c.readLine()
	var ne net.Error
	switch {
	case err == nil || got != "":
		return fmt.Errorf("connection was not closed: got %q", got)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("connection stayed open: %w", err)
	}
	return nil
}

// probeTLS dials a public listener directly with service's leaf from the
// real CA, completes the mTLS handshake and returns the connection (the
// caller closes it). The server chain is checked by the test, not here.
func probeTLS(cp *controlplane.ControlPlane, addr, service string) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	leaf, err := cp.CA.Leaf(ctx, service)
	if err != nil {
		return nil, fmt.Errorf("failed to get %s's leaf: %w", service, err)
	}
	cert, err := leaf.TLSCertificate()
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: &tls.Config{
		Certificates: []tls.Certificate{cert},
		// The peer's SPIFFE identity and chain are what the test checks.
		InsecureSkipVerify: true, //nolint:gosec // verified by the caller
		MinVersion:         tls.VersionTLS12,
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to handshake with %s: %w", addr, err)
	}
	return c.(*tls.Conn), nil
}

// verifyChain verifies a presented chain (leaf first) against roots.
func verifyChain(chain []*x509.Certificate, roots ...*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("no certificate presented")
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// activeRoot returns the CA's active root certificate.
func activeRoot(t testing.TB, cp *controlplane.ControlPlane) *x509.Certificate {
	t.Helper()
	r, ok := cp.CA.Roots().Active()
	if !ok {
		t.Fatal("the CA has no active root")
	}
	certs := parsePEM(t, r.RootCertPEM)
	return certs[0]
}

// parsePEM parses every certificate in a PEM bundle.
func parsePEM(t testing.TB, s string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("failed to parse a certificate: %v", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatal("no certificate in PEM")
	}
	return out
}

// issuedBy reports whether cert was signed by root's key.
func issuedBy(cert, root *x509.Certificate) bool {
	return len(cert.AuthorityKeyId) > 0 && string(cert.AuthorityKeyId) == string(root.SubjectKeyId) &&
		cert.CheckSignatureFrom(root) == nil
}

// adminGet fetches an admin path of a sidecar.
func adminGet(t testing.TB, p *sidecar.Proxy, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: failed to read the body: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d: %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// stat returns a counter or gauge from the sidecar's /stats (0 if unset).
func stat(t testing.TB, p *sidecar.Proxy, name string) int64 {
	t.Helper()
	body := adminGet(t, p, "/stats?filter=^"+regexp.QuoteMeta(name)+"$")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("stat %s = %q: %v", name, v, err)
			}
			return n
		}
	}
	return 0
}

// hostStats returns the per-host lines of /clusters for one cluster:
// "<host>::<stat>" -> value.
func hostStats(t testing.TB, p *sidecar.Proxy, cluster string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, line := range strings.Split(adminGet(t, p, "/clusters"), "\n") {
		rest, ok := strings.CutPrefix(line, cluster+"::")
		if !ok {
			continue
		}
		i := strings.LastIndex(rest, "::")
		if i < 0 {
			continue
		}
		if n, err := strconv.ParseInt(rest[i+2:], 10, 64); err == nil {
			out[rest[:i]] = n
		}
	}
	return out
}

// servedLeaf returns the leaf certificate a sidecar applied for service,
// read from its /config_dump (SDS secret "leaf:<service>").
func servedLeaf(t testing.TB, p *sidecar.Proxy, service string) *x509.Certificate {
	t.Helper()
	var dump struct {
		Configs []struct {
			Type    string `json:"@type"`
			Secrets []struct {
				Name   string `json:"name"`
				Secret struct {
					TLSCertificate struct {
						Chain struct {
							InlineString string `json:"inline_string"`
						} `json:"certificate_chain"`
					} `json:"tls_certificate"`
				} `json:"secret"`
			} `json:"dynamic_active_secrets"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, p, "/config_dump")), &dump); err != nil {
		t.Fatalf("failed to decode /config_dump: %v", err)
	}
	for _, c := range dump.Configs {
		for _, s := range c.Secrets {
			if s.Name == xds.LeafSecretName(service) {
				return parsePEM(t, s.Secret.TLSCertificate.Chain.InlineString)[0]
			}
		}
	}
	t.Fatalf("no secret %s in /config_dump", xds.LeafSecretName(service))
	return nil
}
