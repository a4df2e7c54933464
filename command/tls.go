package command

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/meshlet/meshlet/internal/lazyre"
	"github.com/meshlet/meshlet/internal/tlsutil"
)

func init() {
	register(
		&command{
			name: "tls ca create", args: "[options]", synopsis: "Create a certificate authority for agent TLS",
			help: `Creates a self-signed certificate authority for mutual TLS between meshlet
servers, clients and the CLI, as 'nomad tls ca create' does. Writes
<domain>-agent-ca.pem and <domain>-agent-ca-key.pem (mode 0600) in the
current directory; refuses to overwrite existing files. Keys are ECDSA P-256.`,
			example: "$ meshlet tls ca create\n$ meshlet tls ca create -name-constraint -domain example.org",
			run:     runTLSCACreate,
		},
		&command{
			name: "tls cert create", args: "-server|-client|-cli [options]", synopsis: "Create a server, client or CLI certificate",
			help: `Creates a certificate signed by the agent CA, as 'nomad tls cert create' does,
for exactly one of -server, -client or -cli. Its DNS names are
<role>.<region>.<domain> and localhost (servers and clients also get the IP
127.0.0.1); servers and clients may act as TLS server and client, the CLI as
client only. Writes <region>-<role>-<domain>.pem and ...-key.pem (mode 0600)
in the current directory, with -<node> before .pem when -node is set;
refuses to overwrite existing files.

A server certificate grants authority to become a server and read all
cluster state: keep it as safe as the CA key.`,
			example: "$ meshlet tls cert create -server\n$ meshlet tls cert create -client -node web-1\n$ meshlet tls cert create -server -region eu -additional-ipaddress 10.0.0.5",
			run:     runTLSCertCreate,
		},
	)
}

// domainTemplate in -ca and -key stands for -domain, as in Nomad.
const domainTemplate = "#DOMAIN#"

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// nodeNameRE is what -node may be: it becomes part of file names.
var nodeNameRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func runTLSCACreate(e *env, c *command, args []string) int {
	fs := newFlags(c)
	days := fs.Int("days", tlsutil.DefaultCADays, "number of `days` the CA is valid for")
	domain := fs.String("domain", tlsutil.DefaultDomain, "the cluster's `domain`; names the files and, with -name-constraint, the permitted DNS domain")
	cn := fs.String("common-name", "", "common `name` of the CA (default \"Meshlet Agent CA <serial>\")")
	constrain := fs.Bool("name-constraint", false, "restrict the CA to DNS names under -domain, localhost and -additional-domain")
	var extra stringList
	fs.Var(&extra, "additional-domain", "another permitted `domain` with -name-constraint (repeatable)")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() != 0:
		return e.usageError(c, "tls ca create takes no arguments")
	case *days <= 0:
		return e.usageError(c, fmt.Sprintf("-days must be positive, got %d", *days))
	case len(extra) > 0 && !*constrain:
		return e.usageError(c, "-additional-domain needs -name-constraint")
	}
	certFile, keyFile := *domain+"-agent-ca.pem", *domain+"-agent-ca-key.pem"
	if err := refuseExisting(certFile, keyFile); err != nil {
		return e.errorf("%v", err)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCA(tlsutil.CAOptions{
		Days: *days, Domain: *domain, CommonName: *cn, NameConstraint: *constrain, AdditionalDomains: extra,
	})
	if err != nil {
		return e.errorf("failed to create the CA: %v", err)
	}
	if err := writeNewPair(certFile, certPEM, keyFile, keyPEM); err != nil {
		return e.errorf("%v", err)
	}
	fmt.Fprintf(e.stdout, "==> CA certificate saved to: %s\n==> CA certificate key saved to: %s\n", certFile, keyFile)
	return exitOK
}

// certFlags are the options of `tls cert create`.
type certFlags struct {
	server, client, cli bool
	region, domain, dc  string
	node, ca, key       string
	days                int
	dnsNames, ips       stringList
}

func (f *certFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.server, "server", false, "create a server certificate")
	fs.BoolVar(&f.client, "client", false, "create a client certificate")
	fs.BoolVar(&f.cli, "cli", false, "create a certificate for the CLI")
	fs.StringVar(&f.region, "region", tlsutil.DefaultRegion, "`region` in the certificate's name <role>.<region>.<domain>")
	fs.StringVar(&f.domain, "domain", tlsutil.DefaultDomain, "`domain` in the certificate's name")
	fs.StringVar(&f.dc, "dc", "dc1", "`datacenter`, recorded in the certificate's subject")
	fs.StringVar(&f.node, "node", "", "node `name`, recorded in the subject and added to the file names")
	fs.IntVar(&f.days, "days", tlsutil.DefaultDays, "number of `days` the certificate is valid for")
	fs.StringVar(&f.ca, "ca", domainTemplate+"-agent-ca.pem", "`path` of the CA certificate ("+domainTemplate+" is -domain)")
	fs.StringVar(&f.key, "key", domainTemplate+"-agent-ca-key.pem", "`path` of the CA key ("+domainTemplate+" is -domain)")
	fs.Var(&f.dnsNames, "additional-dnsname", "another DNS `name` for the certificate (repeatable)")
	fs.Var(&f.ips, "additional-ipaddress", "another `IP` address for the certificate (repeatable)")
}

// options checks the flags and returns the certificate's options.
func (f *certFlags) options() (tlsutil.CertOptions, error) {
	opts := tlsutil.CertOptions{Region: f.region, Domain: f.domain, Days: f.days, Datacenter: f.dc, Node: f.node}
	n := 0
	for role, set := range map[string]bool{tlsutil.RoleServer: f.server, tlsutil.RoleClient: f.client, tlsutil.RoleCLI: f.cli} {
		if set {
			opts.Role, n = role, n+1
		}
	}
	switch {
	case n != 1:
		return opts, errors.New("provide exactly one of -server, -client or -cli")
	case f.days <= 0:
		return opts, fmt.Errorf("-days must be positive, got %d", f.days)
	case f.region == "" || f.domain == "":
		return opts, errors.New("-region and -domain must not be empty")
	case f.node != "" && !nodeNameRE.MatchString(f.node):
		return opts, fmt.Errorf("-node %q: use letters, digits, '.', '-' and '_'", f.node)
	}
	for _, s := range f.ips {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			return opts, fmt.Errorf("-additional-ipaddress %q is not an IP address", s)
		}
		opts.IPAddresses = append(opts.IPAddresses, ip)
	}
	opts.DNSNames = f.dnsNames
	return opts, nil
}

func runTLSCertCreate(e *env, c *command, args []string) int {
	var f certFlags
	fs := newFlags(c)
	f.register(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "tls cert create takes no arguments")
	}
	opts, err := f.options()
	if err != nil {
		return e.usageError(c, err.Error())
	}
	prefix := fmt.Sprintf("%s-%s-%s", opts.Region, opts.Role, opts.Domain)
	if f.node != "" {
		prefix += "-" + f.node
	}
	certFile, keyFile := prefix+".pem", prefix+"-key.pem"
	if err := refuseExisting(certFile, keyFile); err != nil {
		return e.errorf("%v", err)
	}
	caFile := strings.ReplaceAll(f.ca, domainTemplate, f.domain)
	caKeyFile := strings.ReplaceAll(f.key, domainTemplate, f.domain)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return e.errorf("failed to read the CA certificate (create one with 'meshlet tls ca create' or set -ca): %v", err)
	}
	caKeyPEM, err := os.ReadFile(caKeyFile)
	if err != nil {
		return e.errorf("failed to read the CA key (set -key): %v", err)
	}
	if f.server {
		fmt.Fprintln(e.stderr, "==> WARNING: Server Certificates grants authority to become a server and access all state in the cluster. Do not distribute them to hosts that are not servers; store them as securely as CA keys.")
	}
	fmt.Fprintf(e.stdout, "==> Using CA file %s and CA key %s\n", caFile, caKeyFile)
	certPEM, keyPEM, err := tlsutil.GenerateCert(caPEM, caKeyPEM, opts)
	if err != nil {
		return e.errorf("failed to create the %s certificate: %v", opts.Role, err)
	}
	if err := writeNewPair(certFile, certPEM, keyFile, keyPEM); err != nil {
		return e.errorf("%v", err)
	}
	what := map[string]string{tlsutil.RoleServer: "Server", tlsutil.RoleClient: "Client", tlsutil.RoleCLI: "CLI"}[opts.Role]
	fmt.Fprintf(e.stdout, "==> %s Certificate saved to: %s\n==> %s Certificate key saved to: %s\n", what, certFile, what, keyFile)
	return exitOK
}

// refuseExisting fails if any of the files exists.
func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s already exists; refusing to overwrite it (remove it or work in another directory)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("failed to check %s: %w", p, err)
		}
	}
	return nil
}

// writeNewPair creates the certificate (0644) and key (0600) files, which
// must not exist; if the second cannot be written the first is removed.
func writeNewPair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	if err := writeNew(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(certFile, certPEM, 0o644); err != nil {
		_ = os.Remove(keyFile)
		return err
	}
	return nil
}

// writeNew creates path with perm (O_EXCL: never replaces a file) and
// writes data to disk.
func writeNew(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists; refusing to overwrite it", path)
		}
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("failed to close %s: %w", path, cerr)
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	// The umask may have narrowed perm; the key must be 0600 exactly, and
	// the certificate readable.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("failed to chmod %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", path, err)
	}
	return nil
}
