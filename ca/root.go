package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// clockSkew backdates NotBefore so that peers with a slightly slow clock
// accept a fresh certificate.
const clockSkew = time.Minute

// rootCA is a root with its key material. Guarded by Manager.mu.
type rootCA struct {
	Root
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey // nil in remote mode
	crossCert *x509.Certificate // this root cross-signed by its predecessor; may be nil
	// rotatedOutAt is when the root stopped being the active one (zero
	// while active).
	rotatedOutAt time.Time
}

// newRootCA generates a self-signed ECDSA P-256 root for trustDomain.
func newRootCA(trustDomain string, ttl time.Duration, now time.Time) (*rootCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate root key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	skid, err := subjectKeyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	tdURI := &url.URL{Scheme: "spiffe", Host: trustDomain}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("meshlet CA %x", serial.Uint64()), Organization: []string{"meshlet"}},
		URIs:                  []*url.URL{tdURI},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ttl),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          skid,
		AuthorityKeyId:        skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("failed to sign root certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("failed to parse root certificate: %w", err)
	}
	r := &rootCA{cert: cert, key: key}
	r.Root = rootInfo(cert)
	return r, nil
}

// crossSign issues a certificate for next's subject and key, signed by prev:
// a peer that still trusts only prev can verify leaves of next through it.
func crossSign(prev, next *rootCA, now time.Time) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := next.cert.NotAfter
	if prev.cert.NotAfter.Before(notAfter) {
		notAfter = prev.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               next.cert.Subject,
		URIs:                  next.cert.URIs,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              next.cert.KeyUsage,
		SubjectKeyId:          next.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, prev.cert, &next.key.PublicKey, prev.key)
	if err != nil {
		return nil, fmt.Errorf("failed to cross-sign root: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("failed to parse cross-signed root: %w", err)
	}
	return cert, nil
}

// rootInfo fills the public description of a root certificate.
func rootInfo(cert *x509.Certificate) Root {
	sum := sha256.Sum256(cert.Raw)
	return Root{
		ID:           colonHex(sum[:20]),
		Name:         cert.Subject.CommonName,
		SerialNumber: cert.SerialNumber.Uint64(),
		SigningKeyID: colonHex(cert.SubjectKeyId),
		NotBefore:    cert.NotBefore.UTC(),
		NotAfter:     cert.NotAfter.UTC(),
		RootCertPEM:  encodeCert(cert),
	}
}

func subjectKeyID(pub *ecdsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return sum[:20], nil
}

// randomSerial returns a positive random 63-bit serial number.
func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	if err != nil {
		return nil, fmt.Errorf("failed to generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(parts, ":")
}

func encodeCert(cert *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func encodeKey(key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("failed to marshal private key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})), nil
}

func parseCertPEM(s string) (*x509.Certificate, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("failed to decode certificate: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("failed to parse certificate: %w", err)
	}
	return cert, nil
}

func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("failed to decode private key: no EC PRIVATE KEY PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("failed to parse private key: %w", err)
	}
	return key, nil
}
