package tlsutil

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// Roles a certificate is made for. The role is the first label of the
// certificate's name: <role>.<region>.<domain>.
const (
	RoleServer = "server"
	RoleClient = "client"
	RoleCLI    = "cli"
)

// Defaults, as in Nomad with "nomad" replaced by "meshlet".
const (
	DefaultRegion  = "global"
	DefaultDomain  = "meshlet"
	DefaultCADays  = 1825
	DefaultDays    = 365
	caCommonPrefix = "Meshlet Agent CA"
	// backdate keeps a fresh certificate valid on a peer whose clock is
	// slightly behind.
	backdate = time.Minute
)

// ErrInvalidOptions marks options GenerateCA and GenerateCert reject.
var ErrInvalidOptions = errors.New("invalid certificate options")

// CAOptions configures GenerateCA.
type CAOptions struct {
	// Days the CA is valid for from now (default 1825, 5 years).
	Days int
	// Domain is the cluster's domain (default "meshlet"); it matters only
	// with NameConstraint.
	Domain string
	// CommonName defaults to "Meshlet Agent CA <serial>".
	CommonName string
	// NameConstraint restricts the CA to signing DNS names under Domain,
	// "localhost" and AdditionalDomains.
	NameConstraint    bool
	AdditionalDomains []string
}

// CertOptions configures GenerateCert.
type CertOptions struct {
	// Role is RoleServer, RoleClient or RoleCLI.
	Role string
	// Region (default "global") and Domain (default "meshlet") make the
	// certificate's name <role>.<region>.<domain>.
	Region, Domain string
	// Days the certificate is valid for from now (default 365).
	Days int
	// DNSNames and IPAddresses are added to the subject alternative names.
	DNSNames    []string
	IPAddresses []net.IP
	// Datacenter and Node, when set, are recorded in the subject's
	// organizational unit ("dc=dc1", "node=web-1"); they are informational.
	Datacenter, Node string
}

// ServerName is the DNS name a server's certificate carries and a client
// checks when it verifies the server's hostname.
func ServerName(region, domain string) string {
	return RoleName(RoleServer, region, domain)
}

// RoleName is <role>.<region>.<domain>, with the defaults filled in.
func RoleName(role, region, domain string) string {
	return role + "." + orDefault(region, DefaultRegion) + "." + orDefault(domain, DefaultDomain)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var (
	labelRE  = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	domainRE = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

// GenerateCA makes a self-signed ECDSA P-256 certificate authority and
// returns the certificate and its private key, PEM encoded.
func GenerateCA(opts CAOptions) (certPEM, keyPEM []byte, err error) {
	days := opts.Days
	if days == 0 {
		days = DefaultCADays
	}
	domain := orDefault(opts.Domain, DefaultDomain)
	if days < 0 {
		return nil, nil, fmt.Errorf("%w: days must be positive, got %d", ErrInvalidOptions, days)
	}
	if !domainRE.MatchString(domain) {
		return nil, nil, fmt.Errorf("%w: domain %q is not a lower-case DNS name", ErrInvalidOptions, domain)
	}
	if len(opts.AdditionalDomains) > 0 && !opts.NameConstraint {
		return nil, nil, fmt.Errorf("%w: additional domains need the name constraint", ErrInvalidOptions)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	cn := opts.CommonName
	if cn == "" {
		cn = caCommonPrefix + " " + serial.String()
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"meshlet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	if opts.NameConstraint {
		tmpl.PermittedDNSDomainsCritical = true
		tmpl.PermittedDNSDomains = append([]string{domain, "localhost"}, opts.AdditionalDomains...)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// GenerateCert makes an ECDSA P-256 certificate for a server, client or
// CLI, signed by the given CA, as `nomad tls cert create` does: its name
// <role>.<region>.<domain> and "localhost" are DNS names, servers and
// clients also get 127.0.0.1; servers and clients may authenticate both
// as TLS servers and clients, a CLI only as a client. The new certificate
// is verified against the CA (which catches a name outside the CA's name
// constraint).
func GenerateCert(caCertPEM, caKeyPEM []byte, opts CertOptions) (certPEM, keyPEM []byte, err error) {
	tmpl, err := certTemplate(opts)
	if err != nil {
		return nil, nil, err
	}
	caCert, err := ParseCertificate(caCertPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse CA certificate: %w", err)
	}
	if !caCert.IsCA {
		return nil, nil, fmt.Errorf("%w: the CA certificate %q is not a certificate authority", ErrInvalidOptions, caCert.Subject.CommonName)
	}
	signer, err := ParseSigner(caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse CA key: %w", err)
	}
	if !publicKeysEqual(signer.Public(), caCert.PublicKey) {
		return nil, nil, fmt.Errorf("%w: the CA key does not belong to the CA certificate", ErrInvalidOptions)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate key: %w", err)
	}
	tmpl.SubjectKeyId = keyID(&key.PublicKey)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to sign certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse the new certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: tmpl.Subject.CommonName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("the new certificate does not verify against the CA: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// certTemplate checks opts and fills in the certificate's fields except
// the keys.
func certTemplate(opts CertOptions) (*x509.Certificate, error) {
	region := orDefault(opts.Region, DefaultRegion)
	domain := orDefault(opts.Domain, DefaultDomain)
	days := opts.Days
	if days == 0 {
		days = DefaultDays
	}
	switch {
	case days < 0:
		return nil, fmt.Errorf("%w: days must be positive, got %d", ErrInvalidOptions, days)
	case !labelRE.MatchString(region):
		return nil, fmt.Errorf("%w: region %q is not a lower-case DNS label", ErrInvalidOptions, region)
	case !domainRE.MatchString(domain):
		return nil, fmt.Errorf("%w: domain %q is not a lower-case DNS name", ErrInvalidOptions, domain)
	}
	var usage []x509.ExtKeyUsage
	ips := slices.Clone(opts.IPAddresses)
	switch opts.Role {
	case RoleServer, RoleClient:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		ips = append(ips, net.IPv4(127, 0, 0, 1))
	case RoleCLI:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return nil, fmt.Errorf("%w: role must be %q, %q or %q, got %q", ErrInvalidOptions, RoleServer, RoleClient, RoleCLI, opts.Role)
	}
	name := RoleName(opts.Role, region, domain)
	dns := []string{name, "localhost"}
	for _, d := range opts.DNSNames {
		if d = strings.TrimSpace(d); d != "" && !slices.Contains(dns, d) {
			dns = append(dns, d)
		}
	}
	var ou []string
	if opts.Datacenter != "" {
		ou = append(ou, "dc="+opts.Datacenter)
	}
	if opts.Node != "" {
		ou = append(ou, "node="+opts.Node)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, OrganizationalUnit: ou},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(0, 0, days),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           usage,
		DNSNames:              dns,
		IPAddresses:           dedupIPs(ips),
	}, nil
}

func dedupIPs(ips []net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if ip != nil && !slices.ContainsFunc(out, ip.Equal) {
			out = append(out, ip)
		}
	}
	return out
}

// ParseCertificate decodes the first CERTIFICATE block of a PEM file.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM CERTIFICATE block found")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// ParseSigner decodes a PEM private key (EC, PKCS#8 or PKCS#1).
func ParseSigner(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key block found")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported private key type %T", k)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("failed to encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("failed to generate serial number: %w", err)
	}
	return serial, nil
}

// keyID is the SHA-256 of the public key, truncated to 20 bytes.
func keyID(pub *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(der)
	return sum[:20]
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	da, errA := x509.MarshalPKIXPublicKey(a)
	db, errB := x509.MarshalPKIXPublicKey(b)
	return errA == nil && errB == nil && bytes.Equal(da, db)
}
