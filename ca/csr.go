package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrInvalidCSR: a certificate signing request is malformed, its signature
// does not verify, its key is not ECDSA P-256 or it asks for another
// identity than the service's.
var ErrInvalidCSR = errors.New("invalid certificate signing request")

// issued is a leaf certificate fresh from a root, before it becomes a Leaf
// (local key) or a SignedCert (CSR).
type issued struct {
	chain    []*x509.Certificate // the leaf, then any intermediate
	rootID   string
	issuedAt time.Time
}

// SignCSR signs csrPEM (a PEM "CERTIFICATE REQUEST") as service's leaf with
// the active root, for a client agent whose CA is in remote mode. The CSR's
// signature must verify, its key must be ECDSA P-256 and a URI SAN, if
// any, must be service's SPIFFE ID (else ErrInvalidCSR); the certificate
// is the one Leaf would issue (the CSR's subject and other SANs are
// ignored). The URI SAN may name another datacenter of the trust domain
// (meshlet's datacenters are node groups sharing these servers; the
// caller checks the node is in it): the leaf is then that datacenter's
// identity; without a URI SAN it is this manager's. Signing is rate
// limited like Leaf. The chain holds the leaf
// and, during a rotation, the cross-signed new root. In remote mode it
// fails with ErrRemote.
func (m *Manager) SignCSR(ctx context.Context, service, csrPEM string) (SignedCert, error) {
	if m.remote() {
		return SignedCert{}, fmt.Errorf("failed to sign CSR for %s: %w", service, ErrRemote)
	}
	if !ValidServiceName(service) {
		return SignedCert{}, fmt.Errorf("%w: %q", ErrInvalidService, service)
	}
	if m.isClosed() {
		return SignedCert{}, ErrClosed
	}
	dc, pub, dns, err := m.checkCSR(service, csrPEM)
	if err != nil {
		return SignedCert{}, err
	}
	if err := m.limiter.Wait(ctx); err != nil {
		return SignedCert{}, fmt.Errorf("failed to sign CSR for %s: %w", service, err)
	}
	is, err := m.issueIn(service, dc, pub, dns)
	if err != nil {
		return SignedCert{}, err
	}
	return SignedCert{CertChainPEM: chainPEM(is.chain), RootID: is.rootID}, nil
}

// checkCSR parses and checks csrPEM and returns the datacenter its URI
// SAN names (this manager's when it has none), its public key and the DNS
// SANs it asks for.
func (m *Manager) checkCSR(service, csrPEM string) (string, *ecdsa.PublicKey, []string, error) {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "", nil, nil, fmt.Errorf("%w: no CERTIFICATE REQUEST PEM block", ErrInvalidCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return "", nil, nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return "", nil, nil, fmt.Errorf("%w: key is %T, want ECDSA P-256", ErrInvalidCSR, csr.PublicKey)
	}
	dc := m.cfg.Datacenter
	switch {
	case len(csr.URIs) > 1:
		return "", nil, nil, fmt.Errorf("%w: %d URI SANs, want at most 1", ErrInvalidCSR, len(csr.URIs))
	case len(csr.URIs) == 1:
		id, err := ParseSpiffeID(csr.URIs[0].String())
		want := SpiffeID{TrustDomain: m.TrustDomain(), Namespace: DefaultNamespace, Datacenter: id.Datacenter, Service: service}
		if err != nil || id != want || !validToken(id.Datacenter, 63) {
			return "", nil, nil, fmt.Errorf("%w: URI SAN %s is not %s", ErrInvalidCSR, csr.URIs[0], m.SpiffeID(service))
		}
		dc = id.Datacenter
	}
	dns, err := csrDNSNames(csr.DNSNames)
	if err != nil {
		return "", nil, nil, err
	}
	return dc, pub, dns, nil
}

// issue signs a leaf for service's identity and pub with the active root,
// with dns as extra DNS SANs. Local leaves and CSRs share it.
func (m *Manager) issue(service string, pub crypto.PublicKey, dns []string) (*issued, error) {
	return m.issueIn(service, m.cfg.Datacenter, pub, dns)
}

// issueIn is issue for service's identity in datacenter dc.
func (m *Manager) issueIn(service, dc string, pub crypto.PublicKey, dns []string) (*issued, error) {
	m.mu.RLock()
	root, td := m.activeLocked(), m.trustDomain
	if root == nil || root.key == nil {
		m.mu.RUnlock()
		return nil, fmt.Errorf("failed to sign leaf for %s: no active root key", service)
	}
	rootCert, rootKey, rootID, cross := root.cert, root.key, root.ID, root.crossCert
	m.mu.RUnlock()

	now := m.now()
	tmpl, err := m.leafTemplate(service, td, dc, now, rootCert.NotAfter)
	if err != nil {
		return nil, err
	}
	for _, n := range dns {
		if !slices.Contains(tmpl.DNSNames, n) {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rootCert, pub, rootKey)
	if err != nil {
		return nil, fmt.Errorf("failed to sign leaf for %s: %w", service, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("failed to parse leaf for %s: %w", service, err)
	}
	chain := []*x509.Certificate{cert}
	if cross != nil {
		chain = append(chain, cross)
	}
	m.metrics.issued.Inc()
	return &issued{chain: chain, rootID: rootID, issuedAt: now}, nil
}

// leafTemplate is the certificate a leaf of service gets: its SPIFFE ID as
// the only URI SAN, a DNS SAN when the name is a DNS label, valid for
// LeafTTL (at most until the root expires). Like Consul's leaves it
// carries a critical Basic Constraints extension with CA false, so no
// verifier, whatever its key-usage handling, can take it as an issuer.
func (m *Manager) leafTemplate(service, trustDomain, dc string, now, rootNotAfter time.Time) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	uri, err := url.Parse(SpiffeID{TrustDomain: trustDomain, Namespace: DefaultNamespace, Datacenter: dc, Service: service}.URI())
	if err != nil {
		return nil, fmt.Errorf("failed to build SPIFFE ID: %w", err)
	}
	notAfter := now.Add(m.cfg.LeafTTL)
	if rootNotAfter.Before(notAfter) {
		notAfter = rootNotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: service},
		URIs:         []*url.URL{uri},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},

		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	if lower := strings.ToLower(service); dnsLabelRE.MatchString(lower) {
		tmpl.DNSNames = []string{lower + ".svc.default." + trustDomain}
	}
	return tmpl, nil
}

// newSigned makes the cacheable leaf of is with its key.
func newSigned(service string, is *issued, keyPEM string, dns []string) *signed {
	cert := is.chain[0]
	return &signed{
		rootID:   is.rootID,
		issuedAt: is.issuedAt,
		dns:      dns,
		leaf: Leaf{
			Service:       service,
			SpiffeID:      cert.URIs[0].String(),
			SerialNumber:  colonHex(cert.SerialNumber.Bytes()),
			CertPEM:       chainPEM(is.chain),
			PrivateKeyPEM: keyPEM,
			ValidAfter:    cert.NotBefore.UTC(),
			ValidBefore:   cert.NotAfter.UTC(),
		},
	}
}

func chainPEM(chain []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range chain {
		b.WriteString(encodeCert(c))
	}
	return b.String()
}
