package command

import (
	"bytes"
	"crypto/x509"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/tlsutil"
)

// readCert parses a PEM certificate file written by the commands.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("failed to read %s: %v", path, err)
	}
	cert, err := tlsutil.ParseCertificate(data)
	if err != nil {
		t.Fatalf("failed to parse %s: %v", path, err)
	}
	return cert
}

// wantMode fails unless path has exactly the permission bits mode.
func wantMode(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != mode {
		t.Fatalf("%s has mode %o, want %o", path, got, mode)
	}
}

// wantOneLineError fails unless r is exit 1 with an "Error:" line first
// and no other error line.
func wantOneLineError(t *testing.T, r cliResult, sub string) {
	t.Helper()
	first, _, _ := strings.Cut(r.stderr, "\n")
	if r.code != 1 || !strings.HasPrefix(first, "Error: ") || !strings.Contains(first, sub) || strings.Count(r.stderr, "Error") != 1 {
		t.Fatalf("exit %d stderr %q; want 1 and one line \"Error: ...%s...\"", r.code, r.stderr, sub)
	}
}

func dirNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestTLSCreate walks Nomad's quick start: a CA, then server, client and
// CLI certificates, in the current directory; the files make a valid
// tlsutil.Config and are never overwritten.
func TestTLSCreate(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, "", "tls", "ca", "create")
	if r.code != 0 || r.stdout != "==> CA certificate saved to: meshlet-agent-ca.pem\n==> CA certificate key saved to: meshlet-agent-ca-key.pem\n" {
		t.Fatalf("ca create: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	wantMode(t, "meshlet-agent-ca.pem", 0o644)
	wantMode(t, "meshlet-agent-ca-key.pem", 0o600)
	if ca := readCert(t, "meshlet-agent-ca.pem"); !ca.IsCA {
		t.Fatal("meshlet-agent-ca.pem is not a CA")
	}
	caBefore, _ := os.ReadFile("meshlet-agent-ca.pem")
	wantOneLineError(t, runCLI(t, "", "tls", "ca", "create"), "meshlet-agent-ca.pem already exists; refusing to overwrite it")
	if caAfter, _ := os.ReadFile("meshlet-agent-ca.pem"); !bytes.Equal(caBefore, caAfter) {
		t.Fatal("the CA was overwritten")
	}

	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tests := []struct {
		args  []string
		file  string
		dns   []string
		ips   []net.IP
		usage []x509.ExtKeyUsage
		ou    []string
	}{
		{[]string{"-server"}, "global-server-meshlet", []string{"server.global.meshlet", "localhost"}, loopback, both, []string{"dc=dc1"}},
		{
			[]string{"-client", "-region", "eu", "-dc", "dc2", "-node", "web-1", "-additional-dnsname", "web-1.example.org", "-additional-ipaddress", "10.1.2.3"},
			"eu-client-meshlet-web-1", []string{"client.eu.meshlet", "localhost", "web-1.example.org"},
			[]net.IP{net.ParseIP("10.1.2.3"), loopback[0]}, both, []string{"dc=dc2", "node=web-1"},
		},
		{[]string{"-cli", "-days", "30"}, "global-cli-meshlet", []string{"cli.global.meshlet", "localhost"}, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, []string{"dc=dc1"}},
	}
	for _, tc := range tests {
		args := append([]string{"tls", "cert", "create"}, tc.args...)
		r := runCLI(t, "", args...)
		want := "==> Using CA file meshlet-agent-ca.pem and CA key meshlet-agent-ca-key.pem\n"
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, "Certificate key saved to: "+tc.file+"-key.pem\n") {
			t.Fatalf("%v: exit %d stdout %q stderr %q", tc.args, r.code, r.stdout, r.stderr)
		}
		if isServer := tc.args[0] == "-server"; isServer != strings.Contains(r.stderr, "WARNING: Server Certificates grants authority") {
			t.Fatalf("%v: stderr %q", tc.args, r.stderr)
		}
		wantMode(t, tc.file+".pem", 0o644)
		wantMode(t, tc.file+"-key.pem", 0o600)
		cert := readCert(t, tc.file+".pem")
		if !slices.Equal(cert.DNSNames, tc.dns) || !slices.EqualFunc(cert.IPAddresses, tc.ips, net.IP.Equal) ||
			!slices.Equal(cert.ExtKeyUsage, tc.usage) || !slices.Equal(cert.Subject.OrganizationalUnit, tc.ou) {
			t.Fatalf("%v: DNS %v IPs %v usage %v OU %v", tc.args, cert.DNSNames, cert.IPAddresses, cert.ExtKeyUsage, cert.Subject.OrganizationalUnit)
		}
		cfg := tlsutil.Config{CAFile: "meshlet-agent-ca.pem", CertFile: tc.file + ".pem", KeyFile: tc.file + "-key.pem"}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
	}
	before, _ := os.ReadFile("global-server-meshlet.pem")
	wantOneLineError(t, runCLI(t, "", "tls", "cert", "create", "-server"), "global-server-meshlet.pem already exists; refusing to overwrite it")
	if after, _ := os.ReadFile("global-server-meshlet.pem"); !bytes.Equal(before, after) {
		t.Fatal("the server certificate was overwritten")
	}
}

// TestTLSNameConstraint: -domain names the CA files and, with
// -name-constraint, limits what the CA signs; a refused certificate
// leaves no files behind.
func TestTLSNameConstraint(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, "", "tls", "ca", "create", "-domain", "example.org", "-name-constraint", "-additional-domain", "corp.example", "-common-name", "Test CA", "-days", "10")
	if r.code != 0 {
		t.Fatalf("ca create: exit %d stderr %q", r.code, r.stderr)
	}
	ca := readCert(t, "example.org-agent-ca.pem")
	if !slices.Equal(ca.PermittedDNSDomains, []string{"example.org", "localhost", "corp.example"}) || ca.Subject.CommonName != "Test CA" {
		t.Fatalf("CA: permitted %v, CN %q", ca.PermittedDNSDomains, ca.Subject.CommonName)
	}
	if r := runCLI(t, "", "tls", "cert", "create", "-server", "-domain", "example.org"); r.code != 0 {
		t.Fatalf("cert create: exit %d stderr %q", r.code, r.stderr)
	}
	if got := readCert(t, "global-server-example.org.pem").DNSNames; !slices.Equal(got, []string{"server.global.example.org", "localhost"}) {
		t.Fatalf("DNS names %v", got)
	}
	before := dirNames(t)
	r = runCLI(t, "", "tls", "cert", "create", "-client", "-domain", "example.org", "-additional-dnsname", "evil.test")
	wantOneLineError(t, r, "failed to create the client certificate: the new certificate does not verify against the CA")
	if after := dirNames(t); !slices.Equal(before, after) {
		t.Fatalf("files changed after a failure: %v -> %v", before, after)
	}
}

func TestTLSUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	if r := runCLI(t, "", "tls", "ca", "create"); r.code != 0 {
		t.Fatalf("ca create: %q", r.stderr)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tls", "cert", "create"}, "provide exactly one of -server, -client or -cli"},
		{[]string{"tls", "cert", "create", "-server", "-client"}, "provide exactly one of -server, -client or -cli"},
		{[]string{"tls", "cert", "create", "-server", "-client", "-cli"}, "provide exactly one of -server, -client or -cli"},
		{[]string{"tls", "cert", "create", "-server", "extra"}, "tls cert create takes no arguments"},
		{[]string{"tls", "cert", "create", "-server", "-days", "0"}, "-days must be positive, got 0"},
		{[]string{"tls", "cert", "create", "-client", "-additional-ipaddress", "10.0.0.300"}, `-additional-ipaddress "10.0.0.300" is not an IP address`},
		{[]string{"tls", "cert", "create", "-client", "-node", "../x"}, `-node "../x"`},
		{[]string{"tls", "cert", "create", "-client", "-region", ""}, "-region and -domain must not be empty"},
		{[]string{"tls", "cert", "create", "-client", "-region", "EU"}, `region "EU" is not a lower-case DNS label`},
		{[]string{"tls", "cert", "create", "-client", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"tls", "cert", "create", "-client", "-ca", "nope.pem"}, "failed to read the CA certificate (create one with 'meshlet tls ca create' or set -ca): open nope.pem: no such file or directory"},
		{[]string{"tls", "cert", "create", "-client", "-key", "meshlet-agent-ca.pem"}, "failed to create the client certificate: failed to parse CA key"},
		{[]string{"tls", "ca", "create", "-days", "-1"}, "-days must be positive"},
		{[]string{"tls", "ca", "create", "-additional-domain", "x.org"}, "-additional-domain needs -name-constraint"},
		{[]string{"tls", "ca", "create", "x"}, "tls ca create takes no arguments"},
		{[]string{"tls", "ca", "create", "-domain", "Not_A_Domain"}, `domain "Not_A_Domain" is not a lower-case DNS name`},
		{[]string{"tls", "ca", "frob"}, `unknown command "tls ca"`},
	}
	before := dirNames(t)
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			wantOneLineError(t, runCLI(t, "", tc.args...), tc.want)
			if after := dirNames(t); !slices.Equal(before, after) {
				t.Fatalf("files changed after a failure: %v -> %v", before, after)
			}
		})
	}
}
