package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
)

// Errors from peer verification; counted by cluster stats and wrapped into
// handshake errors.
var (
	ErrSecretMissing     = errors.New("secret not available")
	ErrPeerNotTrusted    = errors.New("peer certificate chain is not trusted")
	ErrPeerSANMismatch   = errors.New("peer certificate SAN does not match")
	ErrNoPeerCertificate = errors.New("peer presented no certificate")
)

// secretStore publishes the current SDS secrets. Handshakes read it; only
// the ADS loop replaces it, so a new secret applies to the next handshake
// while established connections keep theirs.
type secretStore struct {
	m atomic.Pointer[map[string]*secret]
	// verified caches successful chain verifications (verifyPeer).
	verified verifyCache
}

func (s *secretStore) get(name string) *secret {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[name]
}

func (s *secretStore) replace(m map[string]*secret) { s.m.Store(&m) }

// certificate resolves a certSource to the certificate to present now.
func (s *secretStore) certificate(src *certSource) (*tls.Certificate, error) {
	if src.inline != nil {
		return src.inline, nil
	}
	sec := s.get(src.sds)
	if sec == nil || sec.cert == nil {
		return nil, fmt.Errorf("certificate %q: %w", src.sds, ErrSecretMissing)
	}
	return sec.cert, nil
}

// verifyPeer checks a peer chain against the current roots and SAN matchers
// of v.
func (s *secretStore) verifyPeer(v *validationSource, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return ErrNoPeerCertificate
	}
	roots, sans := v.roots, v.sans
	if v.sds != "" {
		sec := s.get(v.sds)
		if sec == nil || sec.roots == nil {
			return fmt.Errorf("validation context %q: %w", v.sds, ErrSecretMissing)
		}
		roots = sec.roots
		if len(sec.sans) > 0 {
			sans = sec.sans
		}
	}
	if err := s.verified.verify(roots, chain); err != nil {
		return fmt.Errorf("%w: %w", ErrPeerNotTrusted, err)
	}
	if len(sans) == 0 {
		return nil
	}
	leaf := chain[0]
	ips := make([]string, 0, len(leaf.IPAddresses))
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	for _, m := range sans {
		if m.matchesAny(leaf.DNSNames, leaf.URIs, leaf.EmailAddresses, ips) {
			return nil
		}
	}
	return fmt.Errorf("%w: have %v", ErrPeerSANMismatch, leaf.URIs)
}

// envoyCurves are the key exchanges offered and accepted: Envoy's default
// ecdh_curves (X25519, then P-256), which the xDS does not override. Go's
// own default leads with the hybrid X25519MLKEM768, whose ML-KEM key
// generation and encapsulation about double a handshake's key-exchange
// CPU and add 1.2 KB to each ClientHello.
var envoyCurves = []tls.CurveID{tls.X25519, tls.CurveP256}

// serverTLSConfig builds the tls.Config of a listener's TLS context. Its
// callbacks read the secret store per handshake.
func (s *secretStore) serverTLSConfig(d *downstreamTLS) *tls.Config {
	cfg := &tls.Config{
		MinVersion:       d.minVersion,
		MaxVersion:       d.maxVersion,
		CipherSuites:     d.ciphers,
		NextProtos:       d.alpn,
		CurvePreferences: envoyCurves,
		// Full-size records from the first byte: the small start-up
		// records only help a browser over a slow link, and cost a system
		// call each here.
		DynamicRecordSizingDisabled: true,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.certificate(d.cert)
		},
	}
	if d.validation == nil {
		return cfg
	}
	cfg.ClientAuth = tls.RequestClientCert
	if d.requireClientCert {
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 && !d.requireClientCert {
			return nil
		}
		return s.verifyPeer(d.validation, cs.PeerCertificates)
	}
	return cfg
}

// clientTLSConfig builds the tls.Config of a cluster's upstream TLS context:
// SNI, our certificate per handshake, and verification of the server's chain
// and SAN against the current roots (Go's host name check is replaced by it).
func (s *secretStore) clientTLSConfig(u *upstreamTLS) *tls.Config {
	cfg := &tls.Config{
		ServerName:         u.sni,
		MinVersion:         u.minVersion,
		MaxVersion:         u.maxVersion,
		CipherSuites:       u.ciphers,
		NextProtos:         u.alpn,
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		CurvePreferences:   envoyCurves,
		// Full-size records from the first byte (see serverTLSConfig).
		DynamicRecordSizingDisabled: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if u.cert == nil {
				return &tls.Certificate{}, nil
			}
			return s.certificate(u.cert)
		},
	}
	if u.validation != nil {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return s.verifyPeer(u.validation, cs.PeerCertificates)
		}
	}
	return cfg
}

// leafURI returns the first URI SAN of the certificate a certSource holds
// now: our own SPIFFE ID for ext_authz's destination principal.
func (s *secretStore) leafURI(src *certSource) string {
	cert, err := s.certificate(src)
	if err != nil || cert.Leaf == nil || len(cert.Leaf.URIs) == 0 {
		return ""
	}
	return cert.Leaf.URIs[0].String()
}
