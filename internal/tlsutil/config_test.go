package tlsutil

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a CA and certificates written to a test's temp dir.
type pki struct {
	t              *testing.T
	dir            string
	caCert, caKey  []byte
	caFile, caKeyF string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	c, k := mustCA(t, CAOptions{})
	p := &pki{t: t, dir: t.TempDir(), caCert: c, caKey: k}
	p.caFile = p.write("ca.pem", c)
	p.caKeyF = p.write("ca-key.pem", k)
	return p
}

func (p *pki) write(name string, data []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// config makes a certificate for role and returns a Config using it.
func (p *pki) config(name, role string) Config {
	p.t.Helper()
	c, k := mustCert(p.t, p.caCert, p.caKey, CertOptions{Role: role})
	return Config{CAFile: p.caFile, CertFile: p.write(name+".pem", c), KeyFile: p.write(name+"-key.pem", k)}
}

// withCA returns cfg trusting other's CA instead.
func withCA(cfg Config, other *pki) Config {
	cfg.CAFile = other.caFile
	return cfg
}

// result is one side's view of a handshake.
type result struct {
	state tls.ConnectionState
	err   error
}

// handshake runs a real TLS listener on 127.0.0.1 with srv and dials it
// with cli. The server writes "ok" after its handshake; the client reads
// it, so that a client certificate rejected under TLS 1.3 (which the
// client learns only after its own handshake) fails the client too.
func handshake(t *testing.T, srv, cli *tls.Config) (server, client result) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	defer ln.Close()
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		_, err = tc.Write([]byte("ok"))
		done <- result{state: tc.ConnectionState(), err: err}
	}()
	client = dial(ln.Addr().String(), cli)
	return <-done, client
}

func dial(addr string, cfg *tls.Config) result {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return result{err: err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return result{err: err}
	}
	return result{state: conn.ConnectionState()}
}

func mustServerTLS(t *testing.T, c Config) *tls.Config {
	t.Helper()
	cfg, err := c.ServerTLS()
	if err != nil {
		t.Fatalf("ServerTLS: %v", err)
	}
	return cfg
}

func mustClientTLS(t *testing.T, c Config) *tls.Config {
	t.Helper()
	cfg, err := c.ClientTLS()
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	return cfg
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	server := p.config("server", RoleServer)
	client := p.config("client", RoleClient)
	client.VerifyServerHostname = true

	srv, cli := handshake(t, mustServerTLS(t, server), mustClientTLS(t, client))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake failed: server %v, client %v", srv.err, cli.err)
	}
	if srv.state.Version < tls.VersionTLS12 {
		t.Fatalf("TLS version %x", srv.state.Version)
	}
	if role, region, err := PeerRole(srv.state); role != RoleClient || region != "global" || err != nil {
		t.Fatalf("server sees peer %q %q %v, want client global", role, region, err)
	}
	if role, region, err := PeerRole(cli.state); role != RoleServer || region != "global" || err != nil {
		t.Fatalf("client sees peer %q %q %v, want server global", role, region, err)
	}

	// Servers dial each other with their server certificate.
	peer := p.config("server2", RoleServer)
	peer.VerifyServerHostname = true
	srv, cli = handshake(t, mustServerTLS(t, server), mustClientTLS(t, peer))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server to server failed: server %v, client %v", srv.err, cli.err)
	}
	if role, _, err := PeerRole(srv.state); role != RoleServer || err != nil {
		t.Fatalf("server sees peer %q %v, want server", role, err)
	}
}

func TestMutualTLSRejects(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	server := p.config("server", RoleServer)
	client := p.config("client", RoleClient)
	cli := p.config("cli", RoleCLI)
	foreignClient := withCA(other.config("client", RoleClient), p)
	foreignServer := withCA(other.config("server", RoleServer), p)
	checked := client
	checked.VerifyServerHostname = true
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caCert)
	noCert := &tls.Config{RootCAs: pool, ServerName: "server.global.meshlet", MinVersion: tls.VersionTLS12}
	oldTLS := mustClientTLS(t, client)
	oldTLS.MinVersion, oldTLS.MaxVersion = tls.VersionTLS10, tls.VersionTLS11

	tests := []struct {
		name    string
		srv     Config
		cli     *tls.Config
		wantSub string // in the server's or the client's error
	}{
		{"client cert from another CA", server, mustClientTLS(t, foreignClient), "signed by unknown authority"},
		{"no client cert", server, noCert, "didn't provide a certificate"},
		{"client cert serving, hostname verified", client, mustClientTLS(t, checked), "not server.global.meshlet"},
		{"server cert from another CA", foreignServer, mustClientTLS(t, client), "unknown authority"},
		{"cli cert serving", cli, mustClientTLS(t, client), "incompatible key usage"},
		{"TLS 1.1", server, oldTLS, "unsupported versions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := handshake(t, mustServerTLS(t, tc.srv), tc.cli)
			if srv.err == nil && c.err == nil {
				t.Fatal("handshake succeeded")
			}
			if !strings.Contains(errString(srv.err)+" | "+errString(c.err), tc.wantSub) {
				t.Fatalf("errors %v | %v, want %q", srv.err, c.err, tc.wantSub)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestNoHostnameVerification: without VerifyServerHostname a client still
// checks the CA, but accepts any role's certificate that may serve TLS.
func TestNoHostnameVerification(t *testing.T) {
	p := newPKI(t)
	client := p.config("client", RoleClient)
	srv, cli := handshake(t, mustServerTLS(t, client), mustClientTLS(t, client))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake failed: server %v, client %v", srv.err, cli.err)
	}
	if _, _, err := PeerRole(cli.state); !errors.Is(err, ErrPeerNotVerified) {
		t.Fatalf("PeerRole on an unverified chain: %v", err)
	}
}

// TestCertificateReload: a rewritten certificate is served on the next
// handshake without rebuilding the *tls.Config.
func TestCertificateReload(t *testing.T) {
	p := newPKI(t)
	server := p.config("server", RoleServer)
	srvTLS := mustServerTLS(t, server)
	client := p.config("client", RoleClient)
	client.VerifyServerHostname = true
	cliTLS := mustClientTLS(t, client)

	_, first := handshake(t, srvTLS, cliTLS)
	if first.err != nil {
		t.Fatal(first.err)
	}
	renewed := p.config("server", RoleServer) // same paths, new pair
	later := time.Now().Add(time.Hour)
	for _, f := range []string{renewed.CertFile, renewed.KeyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	_, second := handshake(t, srvTLS, cliTLS)
	if second.err != nil {
		t.Fatal(second.err)
	}
	a, b := first.state.PeerCertificates[0].SerialNumber, second.state.PeerCertificates[0].SerialNumber
	if a.Cmp(b) == 0 {
		t.Fatal("server still presents the old certificate")
	}
	// A half-written pair keeps the last good one in use.
	if err := os.WriteFile(renewed.KeyFile, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, third := handshake(t, srvTLS, cliTLS)
	if third.err != nil || third.state.PeerCertificates[0].SerialNumber.Cmp(b) != 0 {
		t.Fatalf("after a torn write: %v", third.err)
	}
}

func TestValidate(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	good := p.config("server", RoleServer)
	foreign := withCA(other.config("server", RoleServer), p)
	mismatched := good
	mismatched.KeyFile = foreign.KeyFile
	missing := good
	missing.CertFile = filepath.Join(p.dir, "nope.pem")
	unset := good
	unset.KeyFile = ""
	expired := good
	expired.CertFile = p.write("expired.pem", expiredCert(t, p))
	expired.KeyFile = expired.CertFile

	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr error
		wantSub string
	}{
		{"missing file", missing, os.ErrNotExist, "nope.pem: no such file or directory"},
		{"unset key", unset, ErrMissingFile, "tls: key file: file not configured"},
		{"another CA", foreign, ErrNotSignedByCA, "tls: cert file " + foreign.CertFile + ": certificate not signed by the CA in " + p.caFile},
		{"key mismatch", mismatched, nil, "private key does not match public key"},
		{"expired", expired, ErrExpired, "expired.pem: certificate expired"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.wantSub) {
			t.Errorf("%s: %v, want %v containing %q", tc.name, err, tc.wantErr, tc.wantSub)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", tc.name, err)
		}
	}
}

// expiredCert signs, with p's CA, a server certificate that expired
// yesterday; the key file is the PEM's second block, so the same file
// serves as cert and key.
func expiredCert(t *testing.T, p *pki) []byte {
	t.Helper()
	_, keyPEM := mustCert(t, p.caCert, p.caKey, CertOptions{Role: RoleServer})
	key, err := ParseSigner(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := ParseCertificate(p.caCert)
	caKey, _ := ParseSigner(p.caKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "server.global.meshlet"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
		DNSNames: []string{"server.global.meshlet"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM...)
}
