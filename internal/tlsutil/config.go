// Package tlsutil builds the mutual-TLS configurations meshlet's servers
// and clients use on the RPC port, and generates the CA and certificates
// for them (`meshlet tls ca create`, `meshlet tls cert create`), as Nomad
// does: a certificate's role and region are its DNS name
// <role>.<region>.<domain> (server.global.meshlet).
//
// Certificates and keys are read from files. The CA is read once per
// *tls.Config; the certificate and key are re-read when either file
// changes (size or modification time), so an agent picks up a renewed
// certificate on its next handshake; a pair that fails to load (half
// written) leaves the previous pair in use.
//
// Concurrency: a *tls.Config returned here is safe for concurrent
// handshakes; Config is a plain value.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Sentinel errors; Validate and the TLS builders wrap them.
var (
	ErrMissingFile   = errors.New("file not configured")
	ErrNotSignedByCA = errors.New("certificate not signed by the CA")
	ErrExpired       = errors.New("certificate expired or not yet valid")
)

// Config names the PEM files of an agent's TLS identity.
type Config struct {
	CAFile, CertFile, KeyFile string
	// VerifyServerHostname makes a client check that the server's
	// certificate names server.<Region>.<Domain>; without it a client
	// only checks that the server's certificate is signed by the CA.
	VerifyServerHostname bool
	// VerifyHTTPSClient makes HTTPServerTLS require client certificates.
	VerifyHTTPSClient bool
	// Region and Domain default to "global" and "meshlet".
	Region, Domain string
}

// ServerName is server.<region>.<domain> for c's region and domain.
func (c Config) ServerName() string { return ServerName(c.Region, c.Domain) }

// ServerTLS is the configuration of the RPC listener: TLS 1.2 or later,
// the agent's certificate, and a client certificate signed by the CA
// required from every peer (mutual TLS). Use PeerRole on the connection
// state to tell a server from a client or CLI.
func (c Config) ServerTLS() (*tls.Config, error) {
	cfg, err := c.serverBase()
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}

// HTTPServerTLS is the configuration of an HTTPS listener: as ServerTLS,
// but client certificates are required only with VerifyHTTPSClient.
func (c Config) HTTPServerTLS() (*tls.Config, error) {
	cfg, err := c.serverBase()
	if err != nil {
		return nil, err
	}
	if c.VerifyHTTPSClient {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func (c Config) serverBase() (*tls.Config, error) {
	pool, err := c.caPool()
	if err != nil {
		return nil, err
	}
	kp, err := newKeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientCAs:  pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}, nil
}

// ClientTLS is the configuration for dialing a server: TLS 1.2 or later,
// the agent's certificate presented, the server's certificate verified
// against the CA and, with VerifyServerHostname, required to name
// server.<region>.<domain> (ServerName is set to it).
func (c Config) ClientTLS() (*tls.Config, error) {
	pool, err := c.caPool()
	if err != nil {
		return nil, err
	}
	kp, err := newKeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}
	if c.VerifyServerHostname {
		cfg.ServerName = c.ServerName()
		return cfg, nil
	}
	// Without hostname verification the chain is still verified, by hand:
	// crypto/tls can only skip both.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyChain(cs.PeerCertificates, pool)
	}
	return cfg, nil
}

// verifyChain checks that the peer's leaf is a server certificate signed by
// the CA, with any intermediates the peer sent.
func verifyChain(certs []*x509.Certificate, pool *x509.CertPool) error {
	if len(certs) == 0 {
		return errors.New("the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("failed to verify the server's certificate: %w", err)
	}
	return nil
}

// Validate checks that the three files are set and readable, that the key
// matches the certificate, and that the certificate is signed by the CA
// and valid now. Its errors are one line naming the file.
func (c Config) Validate() error {
	for _, f := range []struct{ what, path string }{{"CA file", c.CAFile}, {"cert file", c.CertFile}, {"key file", c.KeyFile}} {
		if f.path == "" {
			return fmt.Errorf("tls: %s: %w", f.what, ErrMissingFile)
		}
	}
	pool, err := c.caPool()
	if err != nil {
		return err
	}
	pair, err := loadKeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return err
	}
	leaf := pair.Leaf
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("tls: cert file %s: %w (valid %s to %s)", c.CertFile, ErrExpired,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("tls: CA file %s: %w: %v", c.CAFile, ErrExpired, err)
	case errors.As(err, new(x509.UnknownAuthorityError)):
		return fmt.Errorf("tls: cert file %s: %w in %s", c.CertFile, ErrNotSignedByCA, c.CAFile)
	}
	return fmt.Errorf("tls: cert file %s does not verify against the CA in %s: %w", c.CertFile, c.CAFile, err)
}

// caPool reads CAFile into a pool.
func (c Config) caPool() (*x509.CertPool, error) {
	if c.CAFile == "" {
		return nil, fmt.Errorf("tls: CA file: %w", ErrMissingFile)
	}
	pemBytes, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: failed to read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", c.CAFile)
	}
	return pool, nil
}

// loadKeyPair reads and parses a certificate and its key.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	if certFile == "" {
		return nil, fmt.Errorf("tls: cert file: %w", ErrMissingFile)
	}
	if keyFile == "" {
		return nil, fmt.Errorf("tls: key file: %w", ErrMissingFile)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("tls: failed to read cert file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: failed to read key file: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: failed to load cert file %s with key file %s: %w", certFile, keyFile, err)
	}
	return &pair, nil // X509KeyPair sets Leaf since Go 1.23
}

// keyPair serves a certificate and key, re-read when either file changes.
type keyPair struct {
	certFile, keyFile string

	mu    sync.Mutex
	stamp [2]fileStamp
	pair  *tls.Certificate
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return kp, nil
}

// get returns the current pair, reloading it if a file changed. A reload
// that fails keeps the previous pair (the files may be mid-rewrite).
func (kp *keyPair) get() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	stamp, statErr := kp.stat()
	if kp.pair != nil && (statErr != nil || stamp == kp.stamp) {
		return kp.pair, nil
	}
	pair, err := loadKeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.pair != nil {
			return kp.pair, nil
		}
		return nil, err
	}
	kp.pair, kp.stamp = pair, stamp
	return pair, nil
}

func (kp *keyPair) stat() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, name := range []string{kp.certFile, kp.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return out, nil
}
