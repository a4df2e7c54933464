package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"testing"
)

func TestPeerRoleNames(t *testing.T) {
	tests := []struct {
		cn        string
		dns       []string
		role, reg string
		wantErr   error
	}{
		{"server.global.meshlet", []string{"server.global.meshlet", "localhost"}, "server", "global", nil},
		// The common name decides when it is one of the DNS names.
		{"client.eu.meshlet", []string{"server.eu.meshlet", "client.eu.meshlet"}, "client", "eu", nil},
		// Otherwise the names must agree.
		{"", []string{"cli.us.example.org", "localhost"}, "cli", "us", nil},
		{"", []string{"cli.us.example.org", "cli.us.other.org"}, "cli", "us", nil},
		{"", []string{"server.eu.meshlet", "client.eu.meshlet"}, "", "", ErrAmbiguousRole},
		{"server.eu.meshlet", []string{"localhost", "web.example.org"}, "", "", ErrNoRole},
		{"", []string{"admin.global.meshlet", "server.global"}, "", "", ErrNoRole},
	}
	for _, tc := range tests {
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}, DNSNames: tc.dns}
		cs := tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		role, reg, err := PeerRole(cs)
		if role != tc.role || reg != tc.reg || !errors.Is(err, tc.wantErr) {
			t.Errorf("%q %v: got %q %q %v, want %q %q %v", tc.cn, tc.dns, role, reg, err, tc.role, tc.reg, tc.wantErr)
		}
	}
	if _, _, err := PeerRole(tls.ConnectionState{PeerCertificates: []*x509.Certificate{{DNSNames: []string{"server.global.meshlet"}}}}); !errors.Is(err, ErrPeerNotVerified) {
		t.Errorf("unverified peer: %v", err)
	}
}
