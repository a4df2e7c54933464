package ca

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// TLSCertificate returns the leaf (with its chain) and key as a
// tls.Certificate.
func (l *Leaf) TLSCertificate() (tls.Certificate, error) {
	cert, err := tls.X509KeyPair([]byte(l.CertPEM), []byte(l.PrivateKeyPEM))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("failed to load leaf for %s: %w", l.Service, err)
	}
	return cert, nil
}

// CertPool returns a pool of every root in r.
func (r Roots) CertPool() (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, root := range r.Roots {
		if !pool.AppendCertsFromPEM([]byte(root.RootCertPEM)) {
			return nil, fmt.Errorf("failed to parse root %s", root.ID)
		}
	}
	return pool, nil
}

// Active returns the active root, or false when there is none.
func (r Roots) Active() (Root, bool) {
	for _, root := range r.Roots {
		if root.ID == r.ActiveRootID {
			return root, true
		}
	}
	return Root{}, false
}
