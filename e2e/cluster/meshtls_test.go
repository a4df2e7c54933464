package cluster

// TLS helpers of the mesh isolation test: a peer of the mesh as the test
// process plays it.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"
)

// meshRoots is the cluster's CA roots as host's connect API lists them.
func meshRoots(t *testing.T, host *agent) *x509.CertPool {
	t.Helper()
	out, err := getOnHost(host, "http://127.0.0.1:8500/v1/agent/connect/ca/roots")
	if err != nil {
		t.Fatalf("roots: %v\n%s", err, out)
	}
	var rs struct{ Roots []struct{ RootCert string } }
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs.Roots) == 0 {
		t.Fatalf("roots: %v\n%.300s", err, out)
	}
	pool := x509.NewCertPool()
	for _, r := range rs.Roots {
		if !pool.AppendCertsFromPEM([]byte(r.RootCert)) {
			t.Fatalf("root is no PEM certificate: %.200s", r.RootCert)
		}
	}
	return pool
}

// clientTLS verifies the server's chain against roots (mesh leaves carry
// a SPIFFE URI, no host name) and presents cert when not nil.
func clientTLS(roots *x509.CertPool, cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{
		InsecureSkipVerify: true, // verified below, without a host name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// tlsGet sends GET /hello_b over TLS to addr and returns what came back;
// a failed handshake or a close before any byte is an error.
func tlsGet(addr string, cfg *tls.Config) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", fmt.Errorf("handshake: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, "GET /hello_b HTTP/1.1\r\nHost: service-b\r\nConnection: close\r\n\r\n"); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	b, err := io.ReadAll(conn)
	if len(b) > 0 {
		return string(b), nil
	}
	if err == nil {
		err = io.EOF
	}
	return "", fmt.Errorf("no answer: %w", err)
}

// foreignCert is a self-signed client certificate (not from the cluster's
// CA) carrying spiffeID, the identity of a real service.
func foreignCert(t *testing.T, spiffeID string) tls.Certificate {
	t.Helper()
	uri, err := url.Parse(spiffeID)
	if err != nil || uri.Scheme != "spiffe" {
		t.Fatalf("service-a's leaf has no SPIFFE ID: %q", spiffeID)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "service-a"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), URIs: []*url.URL{uri},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
