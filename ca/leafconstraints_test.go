package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"net/url"
	"testing"
	"time"
)

var oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}

// checkNotCA fails unless cert carries a critical Basic Constraints
// extension saying it is not a CA.
func checkNotCA(t *testing.T, what string, cert *x509.Certificate) {
	t.Helper()
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidBasicConstraints) {
			continue
		}
		if !ext.Critical || !cert.BasicConstraintsValid || cert.IsCA {
			t.Errorf("%s: Basic Constraints critical=%v valid=%v isCA=%v, want critical, CA false",
				what, ext.Critical, cert.BasicConstraintsValid, cert.IsCA)
		}
		return
	}
	t.Errorf("%s: no Basic Constraints extension", what)
}

// Leaves, local or signed from a CSR, say they are no CA, and a
// certificate a leaf signs does not verify.
func TestLeafIsNotCA(t *testing.T) {
	m := newTestManager(t, Config{})
	l := mustLeaf(t, m, "web")
	leaf := parseLeafChain(t, l)[0]
	checkNotCA(t, "local leaf", leaf)

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sc, err := m.SignCSR(context.Background(), "api", csrFor(t, key))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := parseChainPEM(sc.CertChainPEM)
	if err != nil {
		t.Fatal(err)
	}
	checkNotCA(t, "CSR leaf", signed[0])

	tc, err := l.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	uri, _ := url.Parse(m.SpiffeID("db"))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "db"},
		URIs:         []*url.URL{uri},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, leaf, &key.PublicKey, tc.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatalf("signing with the leaf: %v", err)
	}
	forged, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := m.Roots().CertPool()
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	inter.AddCert(leaf)
	if _, err := forged.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("a chain through a leaf verifies")
	}
	if err := forged.CheckSignatureFrom(leaf); !errors.As(err, new(x509.ConstraintViolationError)) {
		t.Errorf("CheckSignatureFrom(leaf) = %v, want ConstraintViolationError", err)
	}
	if svc, err := m.VerifyPeer([][]byte{forged.Raw, leaf.Raw}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("VerifyPeer of a chain through a leaf = %q, %v, want ErrUntrusted", svc, err)
	}
}
