package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustCA(t *testing.T, opts CAOptions) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := GenerateCA(opts)
	if err != nil {
		t.Fatalf("GenerateCA: %v", err)
	}
	return c, k
}

func mustCert(t *testing.T, caCert, caKey []byte, opts CertOptions) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := GenerateCert(caCert, caKey, opts)
	if err != nil {
		t.Fatalf("GenerateCert(%+v): %v", opts, err)
	}
	return c, k
}

func TestGenerateCA(t *testing.T) {
	certPEM, keyPEM := mustCA(t, CAOptions{})
	ca, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("not a CA: IsCA=%v usage=%v", ca.IsCA, ca.KeyUsage)
	}
	if !strings.HasPrefix(ca.Subject.CommonName, "Meshlet Agent CA ") {
		t.Fatalf("common name %q", ca.Subject.CommonName)
	}
	if days := ca.NotAfter.Sub(ca.NotBefore).Hours() / 24; days < 1824 || days > 1826 {
		t.Fatalf("CA valid for %.1f days, want 1825", days)
	}
	if len(ca.PermittedDNSDomains) != 0 {
		t.Fatalf("unexpected name constraint %v", ca.PermittedDNSDomains)
	}
	key, err := ParseSigner(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if ek, ok := key.(*ecdsa.PrivateKey); !ok || ek.Curve != elliptic.P256() {
		t.Fatalf("CA key is %T, want ECDSA P-256", key)
	}
	if _, _, err := GenerateCA(CAOptions{Days: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("negative days: %v", err)
	}
	if _, _, err := GenerateCA(CAOptions{AdditionalDomains: []string{"x.com"}}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("additional domain without constraint: %v", err)
	}
}

func TestGenerateCertRoles(t *testing.T) {
	caCert, caKey := mustCA(t, CAOptions{})
	loopback := net.IPv4(127, 0, 0, 1)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tests := []struct {
		opts  CertOptions
		dns   []string
		ips   []net.IP
		usage []x509.ExtKeyUsage
	}{
		{CertOptions{Role: RoleServer}, []string{"server.global.meshlet", "localhost"}, []net.IP{loopback}, both},
		{CertOptions{Role: RoleClient, Region: "eu", Domain: "example.org"}, []string{"client.eu.example.org", "localhost"}, []net.IP{loopback}, both},
		{CertOptions{Role: RoleCLI}, []string{"cli.global.meshlet", "localhost"}, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{
			CertOptions{Role: RoleServer, DNSNames: []string{"s1.example.org", "localhost"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.5"), loopback}},
			[]string{"server.global.meshlet", "localhost", "s1.example.org"}, []net.IP{net.ParseIP("10.0.0.5").To4(), loopback}, both,
		},
	}
	for _, tc := range tests {
		certPEM, _ := mustCert(t, caCert, caKey, tc.opts)
		leaf, err := ParseCertificate(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(leaf.DNSNames, tc.dns) {
			t.Errorf("%+v: DNS names %v, want %v", tc.opts, leaf.DNSNames, tc.dns)
		}
		if !slices.EqualFunc(leaf.IPAddresses, tc.ips, net.IP.Equal) {
			t.Errorf("%+v: IPs %v, want %v", tc.opts, leaf.IPAddresses, tc.ips)
		}
		if !slices.Equal(leaf.ExtKeyUsage, tc.usage) {
			t.Errorf("%+v: ext key usage %v, want %v", tc.opts, leaf.ExtKeyUsage, tc.usage)
		}
		if leaf.IsCA {
			t.Errorf("%+v: leaf is a CA", tc.opts)
		}
		if days := time.Until(leaf.NotAfter).Hours() / 24; days < 364 || days > 366 {
			t.Errorf("%+v: valid for %.1f more days, want 365", tc.opts, days)
		}
	}
}

func TestGenerateCertSubject(t *testing.T) {
	caCert, caKey := mustCA(t, CAOptions{})
	certPEM, _ := mustCert(t, caCert, caKey, CertOptions{Role: RoleClient, Datacenter: "dc2", Node: "web-1", Days: 30})
	leaf, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "client.global.meshlet" || !slices.Equal(leaf.Subject.OrganizationalUnit, []string{"dc=dc2", "node=web-1"}) {
		t.Fatalf("subject %v", leaf.Subject)
	}
	if days := time.Until(leaf.NotAfter).Hours() / 24; days < 29 || days > 31 {
		t.Fatalf("valid for %.1f more days, want 30", days)
	}
}

func TestGenerateCertRejects(t *testing.T) {
	caCert, caKey := mustCA(t, CAOptions{})
	_, otherKey := mustCA(t, CAOptions{})
	constrained, constrainedKey := mustCA(t, CAOptions{NameConstraint: true, Domain: "meshlet"})
	leafCert, leafKey := mustCert(t, caCert, caKey, CertOptions{Role: RoleServer})
	tests := []struct {
		name       string
		cert, key  []byte
		opts       CertOptions
		wantErrSub string
	}{
		{"no role", caCert, caKey, CertOptions{}, `role must be "server", "client" or "cli"`},
		{"bad region", caCert, caKey, CertOptions{Role: RoleServer, Region: "eu.west"}, `region "eu.west" is not a lower-case DNS label`},
		{"bad domain", caCert, caKey, CertOptions{Role: RoleServer, Domain: "Bad_Domain"}, `domain "Bad_Domain"`},
		{"negative days", caCert, caKey, CertOptions{Role: RoleServer, Days: -3}, "days must be positive"},
		{"key of another CA", caCert, otherKey, CertOptions{Role: RoleServer}, "the CA key does not belong to the CA certificate"},
		{"leaf as CA", leafCert, leafKey, CertOptions{Role: RoleServer}, "is not a certificate authority"},
		{"garbage CA", []byte("nope"), caKey, CertOptions{Role: RoleServer}, "failed to parse CA certificate"},
		{"outside name constraint", constrained, constrainedKey, CertOptions{Role: RoleServer, DNSNames: []string{"evil.example.com"}}, "does not verify against the CA"},
	}
	for _, tc := range tests {
		_, _, err := GenerateCert(tc.cert, tc.key, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.wantErrSub)
		}
	}
	// Inside the constraint is fine.
	mustCert(t, constrained, constrainedKey, CertOptions{Role: RoleClient, DNSNames: []string{"n1.meshlet"}})
}
