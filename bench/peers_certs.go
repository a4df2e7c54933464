package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// peerServerName is the DNS name in the server side's certificate, the
// name the client side proxies verify.
const peerServerName = "server.bench.meshlet"

// peerCerts are the PEM files of the bench CA and of one ECDSA P-256 leaf
// per side, written for the peer proxies (nginx, HAProxy).
type peerCerts struct {
	CA string // CA certificate (both sides verify the other against it)
	// ServerCert/ServerKey and ClientCert/ClientKey are the leaves;
	// ServerBundle and ClientBundle hold certificate and key in one file
	// (HAProxy's crt).
	ServerCert, ServerKey, ServerBundle string
	ClientCert, ClientKey, ClientBundle string
}

// writePeerCerts makes a bench CA and a server and a client leaf signed by
// it, and writes them as PEM files under dir.
func writePeerCerts(dir string) (peerCerts, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return peerCerts{}, fmt.Errorf("failed to generate CA key: %w", err)
	}
	caTmpl := certTemplate("meshlet bench CA")
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return peerCerts{}, fmt.Errorf("failed to sign CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return peerCerts{}, fmt.Errorf("failed to parse CA certificate: %w", err)
	}
	c := peerCerts{CA: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(c.CA, pemBlock("CERTIFICATE", caDER), 0o644); err != nil {
		return peerCerts{}, fmt.Errorf("failed to write CA certificate: %w", err)
	}
	c.ServerCert, c.ServerKey, c.ServerBundle, err = writeLeaf(dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return peerCerts{}, err
	}
	c.ClientCert, c.ClientKey, c.ClientBundle, err = writeLeaf(dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return peerCerts{}, err
	}
	return c, nil
}

func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

// writeLeaf signs an ECDSA P-256 leaf for one side and writes its
// certificate, key and bundle (certificate then key).
func writeLeaf(dir, side string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (cert, key, bundle string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("failed to generate %s key: %w", side, err)
	}
	tmpl := certTemplate(side + ".bench.meshlet")
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.DNSNames = []string{side + ".bench.meshlet"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("failed to sign %s certificate: %w", side, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", "", fmt.Errorf("failed to encode %s key: %w", side, err)
	}
	certPEM, keyPEM := pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER)
	cert, key, bundle = filepath.Join(dir, side+".pem"), filepath.Join(dir, side+".key"), filepath.Join(dir, side+"-bundle.pem")
	for _, f := range []struct {
		path string
		data []byte
	}{{cert, certPEM}, {key, keyPEM}, {bundle, append(append([]byte{}, certPEM...), keyPEM...)}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return "", "", "", fmt.Errorf("failed to write %s: %w", f.path, err)
		}
	}
	return cert, key, bundle, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
