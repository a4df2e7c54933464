package command

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/consulapi"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/internal/tlsutil"
)

// cliTLSFiles are made by `meshlet tls`: the CA, a server certificate (the
// agent's) and a CLI certificate, as absolute paths.
type cliTLSFiles struct {
	CA, Cert, Key, CLICert, CLIKey string
}

func makeCLITLSFiles(t *testing.T) cliTLSFiles {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}, {"tls", "cert", "create", "-cli"}} {
		if r := runCLI(t, "", args...); r.code != 0 {
			t.Fatalf("%v: %s", args, r.stderr)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	return cliTLSFiles{CA: p("meshlet-agent-ca.pem"), Cert: p("global-server-meshlet.pem"), Key: p("global-server-meshlet-key.pem"),
		CLICert: p("global-cli-meshlet.pem"), CLIKey: p("global-cli-meshlet-key.pem")}
}

// clearTLSEnv unsets every TLS variable the CLI reads.
func clearTLSEnv(t *testing.T) {
	for _, p := range []string{"MESHLET_", "NOMAD_", "CONSUL_"} {
		for _, n := range []string{"CACERT", "CLIENT_CERT", "CLIENT_KEY", "TLS_SERVER_NAME", "SKIP_VERIFY"} {
			t.Setenv(p+n, "")
		}
	}
	t.Setenv("CONSUL_HTTP_SSL_VERIFY", "")
}

// serveTLS serves h over HTTPS with the agent's certificate as the agent
// does (tlsutil's HTTPServerTLS) and returns its host:port.
func serveTLS(t *testing.T, f cliTLSFiles, h http.Handler, verifyClient bool) string {
	t.Helper()
	cfg, err := tlsutil.Config{CAFile: f.CA, CertFile: f.Cert, KeyFile: f.Key, VerifyHTTPSClient: verifyClient}.HTTPServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = tls.NewListener(srv.Listener, cfg)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake errors are the point
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// newTLSAgent serves the fake backend's HTTP API over HTTPS.
func newTLSAgent(t *testing.T, f cliTLSFiles, verifyClient bool) string {
	t.Helper()
	clearTLSEnv(t)
	return serveTLS(t, f, api.NewServer(apitest.NewBackend(), hclog.NewNullLogger()).Handler(), verifyClient)
}

// The CLI reaches an HTTPS agent with MESHLET_CACERT (or NOMAD_CACERT, or
// -ca-cert); without the CA it fails with one line saying what to set, and
// so does an http:// address for the HTTPS port.
func TestCLIOverHTTPS(t *testing.T) {
	f := makeCLITLSFiles(t)
	addr := newTLSAgent(t, f, false)
	t.Setenv("MESHLET_ADDR", "https://"+addr)
	okNodes := func(r cliResult, how string) {
		t.Helper()
		if r.code != 0 || !strings.Contains(r.stdout, "dev-1") {
			t.Fatalf("node status %s: exit %d stdout %q stderr %q", how, r.code, r.stdout, r.stderr)
		}
	}

	wantOneLineError(t, runCLI(t, "", "node", "status"), "set MESHLET_CACERT or -ca-cert")
	okNodes(runCLI(t, "", "node", "status", "-ca-cert", f.CA), "with -ca-cert")
	okNodes(runCLI(t, "", "node", "status", "-tls-skip-verify"), "with -tls-skip-verify")
	t.Setenv("NOMAD_CACERT", f.CA)
	okNodes(runCLI(t, "", "node", "status"), "with NOMAD_CACERT")
	t.Setenv("NOMAD_CACERT", "")
	t.Setenv("MESHLET_CACERT", f.CA)
	okNodes(runCLI(t, "", "node", "status"), "with MESHLET_CACERT")
	// A bare host:port with TLS settings is https.
	okNodes(runCLI(t, "", "node", "status", "-address", addr), "with a bare address")
	// The certificate names localhost and 127.0.0.1, not other names.
	_, port, _ := net.SplitHostPort(addr)
	okNodes(runCLI(t, "", "node", "status", "-address", "https://localhost:"+port), "with localhost")
	wantOneLineError(t, runCLI(t, "", "node", "status", "-tls-server-name", "elsewhere.example"), "set MESHLET_TLS_SERVER_NAME")
	okNodes(runCLI(t, "", "node", "status", "-tls-server-name", "server.global.meshlet"), "with -tls-server-name")

	wantOneLineError(t, runCLI(t, "", "node", "status", "-address", "http://"+addr), "serves HTTPS (tls.http): use an https:// address in MESHLET_ADDR")
	if r := runCLI(t, "", "node", "status", "-ca-cert", filepath.Join(t.TempDir(), "missing.pem")); r.code != 1 ||
		!strings.HasPrefix(r.stderr, "Error: failed to create API client for https://"+addr+": ") || !strings.Contains(r.stderr, "missing.pem") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("node status with a missing CA file: exit %d stderr %q", r.code, r.stderr)
	}

	// An https:// address for a plain HTTP agent.
	plain := httptest.NewServer(api.NewServer(apitest.NewBackend(), hclog.NewNullLogger()).Handler())
	t.Cleanup(plain.Close)
	wantOneLineError(t, runCLI(t, "", "node", "status", "-address", strings.Replace(plain.URL, "http:", "https:", 1)),
		"does not serve TLS: use an http:// address in MESHLET_ADDR")
}

// verify_https_client: the CLI needs MESHLET_CLIENT_CERT and
// MESHLET_CLIENT_KEY (a `meshlet tls cert create -cli` certificate).
func TestCLIClientCertificate(t *testing.T) {
	f := makeCLITLSFiles(t)
	addr := newTLSAgent(t, f, true)
	t.Setenv("MESHLET_ADDR", "https://"+addr)
	t.Setenv("MESHLET_CACERT", f.CA)
	wantOneLineError(t, runCLI(t, "", "node", "status"), "requires a client certificate (tls.verify_https_client): set MESHLET_CLIENT_CERT and MESHLET_CLIENT_KEY")
	t.Setenv("MESHLET_CLIENT_CERT", f.CLICert)
	t.Setenv("MESHLET_CLIENT_KEY", f.CLIKey)
	if r := runCLI(t, "", "node", "status"); r.code != 0 || !strings.Contains(r.stdout, "dev-1") {
		t.Fatalf("node status with a client certificate: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Setenv("MESHLET_CLIENT_KEY", "")
	wantOneLineError(t, runCLI(t, "", "node", "status"), "client cert and client key")
}

// The connect commands take the same TLS settings (MESHLET_CACERT, or
// Consul's CONSUL_CACERT...): the official Consul client and the plain
// request of `intention check` both go over HTTPS with a client
// certificate.
func TestConnectCLIOverHTTPS(t *testing.T) {
	f := makeCLITLSFiles(t)
	clearTLSEnv(t)
	store, err := intention.New("", true, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := consulapi.NewServer(consulapi.Deps{Catalog: catalog.New(), Intentions: store}, hclog.NewNullLogger())
	addr := serveTLS(t, f, srv.Handler(), true)
	t.Setenv("MESHLET_CONNECT_ADDR", "https://"+addr)

	wantOneLineError(t, runCLI(t, "", "intention", "list"), "set MESHLET_CACERT or -ca-cert")
	t.Setenv("CONSUL_CACERT", f.CA)
	wantOneLineError(t, runCLI(t, "", "intention", "list"), "set MESHLET_CLIENT_CERT and MESHLET_CLIENT_KEY")
	// check exits 2 on errors (1 is "denied").
	if r := runCLI(t, "", "intention", "check", "web", "db"); r.code != 2 || !strings.Contains(r.stderr, "set MESHLET_CLIENT_CERT and MESHLET_CLIENT_KEY") {
		t.Fatalf("intention check without a client certificate: exit %d stderr %q", r.code, r.stderr)
	}
	t.Setenv("CONSUL_CLIENT_CERT", f.CLICert)
	t.Setenv("CONSUL_CLIENT_KEY", f.CLIKey)
	for _, st := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"intention", "create", "-deny", "web", "db"}, 0, "Created: web => db (deny)\n"},
		{[]string{"intention", "check", "web", "db"}, 1, "Denied\n"},
		{[]string{"intention", "check", "-ca-cert", f.CA, "-client-cert", f.CLICert, "-client-key", f.CLIKey, "api", "db"}, 0, "Allowed\n"},
	} {
		if r := runCLI(t, "", st.args...); r.code != st.code || r.stdout != st.out {
			t.Fatalf("%v: exit %d stdout %q stderr %q", st.args, r.code, r.stdout, r.stderr)
		}
	}
	wantOneLineError(t, runCLI(t, "", "intention", "list", "-connect-address", "http://"+addr),
		"serves HTTPS (tls.http): use an https:// address in MESHLET_CONNECT_ADDR")
}

// The real agent with tls.http and verify_https_client, its certificates
// from `meshlet tls`: the banner says https:// and MESHLET_CACERT, and
// the CLI reaches both APIs with the CA and a CLI certificate.
func TestAgentCommandHTTPS(t *testing.T) {
	f := makeCLITLSFiles(t)
	clearTLSEnv(t)
	cfg := writeFile(t, "agent.hcl", fmt.Sprintf(`
data_dir  = %q
bind_addr = "127.0.0.1"
ports {
  http         = 0
  connect_http = 0
  grpc         = 0
  rpc          = 0
}
tls {
  http                = true
  verify_https_client = true
  ca_file             = %q
  cert_file           = %q
  key_file            = %q
}
`, filepath.Join(t.TempDir(), "data"), f.CA, f.Cert, f.Key))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, done := startCLI(ctx, "agent", "-config", cfg, "-log-level", "info")
	addrRE := regexp.MustCompile(`HTTP API\s+= (https://127\.0\.0\.1:\d+)`)
	testutil.WaitFor(t, hangGuard, "the agent banner", func() bool {
		select {
		case code := <-done:
			t.Fatalf("agent exited early with %d:\n%s%s", code, stdout, stderr)
		default:
		}
		return addrRE.MatchString(stdout.String())
	})
	if !strings.Contains(stdout.String(), "MESHLET_CACERT="+f.CA) {
		t.Fatalf("banner does not name the CA:\n%s", stdout)
	}
	t.Setenv("MESHLET_ADDR", addrRE.FindStringSubmatch(stdout.String())[1])
	t.Setenv("MESHLET_CACERT", f.CA)
	wantOneLineError(t, runCLI(t, "", "node", "status"), "set MESHLET_CLIENT_CERT and MESHLET_CLIENT_KEY")
	t.Setenv("MESHLET_CLIENT_CERT", f.CLICert)
	t.Setenv("MESHLET_CLIENT_KEY", f.CLIKey)
	testutil.WaitFor(t, hangGuard, "a ready node", func() bool {
		r := runCLI(t, "", "node", "status")
		return r.code == 0 && strings.Contains(r.stdout, "ready")
	})
	connectRE := regexp.MustCompile(`control plane started: .*http_addr=(127\.0\.0\.1:\d+)`)
	m := connectRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no connect API address in the log:\n%s", stderr)
	}
	t.Setenv("MESHLET_CONNECT_ADDR", "https://"+m[1])
	if r := runCLI(t, "", "intention", "check", "web", "db"); r.code != 0 || r.stdout != "Allowed\n" {
		t.Fatalf("intention check over HTTPS: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("agent exit %d:\n%s%s", code, stdout, stderr)
	}
}
