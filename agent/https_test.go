package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	nomad "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/internal/tlsutil"
)

// httpsFiles are a CA, an agent (server) certificate and a CLI
// certificate made by the same generator as `meshlet tls`.
type httpsFiles struct {
	CA, Cert, Key, CLICert, CLIKey string
}

func writeHTTPSFiles(t *testing.T) httpsFiles {
	t.Helper()
	dir := t.TempDir()
	caCert, caKey, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := httpsFiles{CA: write("ca.pem", caCert)}
	cert, key, err := tlsutil.GenerateCert(caCert, caKey, tlsutil.CertOptions{Role: tlsutil.RoleServer})
	if err != nil {
		t.Fatal(err)
	}
	f.Cert, f.Key = write("server.pem", cert), write("server-key.pem", key)
	cert, key, err = tlsutil.GenerateCert(caCert, caKey, tlsutil.CertOptions{Role: tlsutil.RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	f.CLICert, f.CLIKey = write("cli.pem", cert), write("cli-key.pem", key)
	return f
}

func startHTTPSAgent(t *testing.T, f httpsFiles, verifyClient bool) *Agent {
	t.Helper()
	return startAgentWith(t, t.TempDir(), func(c *Config) {
		c.TLS.HTTP, c.TLS.VerifyHTTPSClient = true, verifyClient
		c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile = f.CA, f.Cert, f.Key
	})
}

// httpsGet fetches url trusting the CA, with the client certificate when
// cert is set.
func httpsGet(t *testing.T, f httpsFiles, url string, withCert bool) (*http.Response, error) {
	t.Helper()
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		pair, err := tls.LoadX509KeyPair(f.CLICert, f.CLIKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// With tls.http both APIs serve HTTPS with the agent's certificate (its
// 127.0.0.1 name verifies), plain HTTP gets Go's 400 for an HTTP request
// on a TLS port, and the official Nomad client runs a job, reads its logs
// and execs in it over HTTPS (the node's TLSEnabled sends its direct
// client connection to https, which falls back to the agent).
func TestHTTPSServesBothAPIs(t *testing.T) {
	f := writeHTTPSFiles(t)
	a := startHTTPSAgent(t, f, false)
	cleanupJob(t, &a, apitest.OfficialClientJobID)
	nomadURL, consulURL := "https://"+a.HTTPAddr(), "https://"+a.ControlPlane().HTTPAddr()

	for _, u := range []string{nomadURL + "/v1/agent/self", consulURL + "/v1/catalog/services"} {
		resp, err := httpsGet(t, f, u, false)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s over HTTPS: %v %v", u, resp, err)
		}
		plain := "http" + strings.TrimPrefix(u, "https")
		resp, err = http.Get(plain)
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("GET %s over plain HTTP = %d, want refused", plain, resp.StatusCode)
		}
	}
	if _, err := http.Get(nomadURL + "/v1/jobs"); err == nil {
		// Go's own client: the untrusted certificate fails the handshake.
		t.Fatal("GET over HTTPS without the CA succeeded")
	} else if !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Fatalf("GET over HTTPS without the CA: %v, want a certificate verification error", err)
	}

	cc, err := consul.NewClient(&consul.Config{Address: consulURL, TLSConfig: consul.TLSConfig{CAFile: f.CA}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Connect().IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatalf("official Consul client over HTTPS: %v", err)
	}
	if roots, _, err := cc.Agent().ConnectCARoots(nil); err != nil || len(roots.Roots) == 0 {
		t.Fatalf("official Consul client over HTTPS: roots %v %v", roots, err)
	}

	apitest.ExerciseOfficialClientConfig(t, &nomad.Config{Address: nomadURL, TLSConfig: &nomad.TLSConfig{CACert: f.CA}})
	nodes, _, err := mustNomad(t, nomadURL, f).Nodes().List(nil)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	node, _, err := mustNomad(t, nomadURL, f).Nodes().Info(nodes[0].ID, nil)
	if err != nil || !node.TLSEnabled {
		t.Fatalf("node TLSEnabled = %v (%v), want true", node != nil && node.TLSEnabled, err)
	}
}

func mustNomad(t *testing.T, url string, f httpsFiles) *nomad.Client {
	t.Helper()
	c, err := nomad.NewClient(&nomad.Config{Address: url, TLSConfig: &nomad.TLSConfig{CACert: f.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verify_https_client: both APIs refuse a client without a certificate
// signed by the CA and serve one with it (the official clients included).
func TestHTTPSVerifyClient(t *testing.T) {
	f := writeHTTPSFiles(t)
	a := startHTTPSAgent(t, f, true)
	t.Cleanup(func() { _ = a.Shutdown() })
	nomadURL, consulURL := "https://"+a.HTTPAddr(), "https://"+a.ControlPlane().HTTPAddr()
	for _, u := range []string{nomadURL + "/v1/jobs", consulURL + "/v1/catalog/services"} {
		if resp, err := httpsGet(t, f, u, false); err == nil {
			t.Fatalf("GET %s without a client certificate = %d, want a TLS error", u, resp.StatusCode)
		} else if !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("GET %s without a client certificate: %v, want certificate required", u, err)
		}
		if resp, err := httpsGet(t, f, u, true); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with a client certificate: %v %v", u, resp, err)
		}
	}
	nc, err := nomad.NewClient(&nomad.Config{Address: nomadURL,
		TLSConfig: &nomad.TLSConfig{CACert: f.CA, ClientCert: f.CLICert, ClientKey: f.CLIKey}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nc.Jobs().List(nil); err != nil {
		t.Fatalf("official Nomad client with a client certificate: %v", err)
	}
	cc, err := consul.NewClient(&consul.Config{Address: consulURL,
		TLSConfig: consul.TLSConfig{CAFile: f.CA, CertFile: f.CLICert, KeyFile: f.CLIKey}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cc.Catalog().Services(nil); err != nil {
		t.Fatalf("official Consul client with a client certificate: %v", err)
	}
}

// A certificate the CA did not sign stops the agent at start, naming the file.
func TestHTTPSBadCertRefusesToStart(t *testing.T) {
	f := writeHTTPSFiles(t)
	other := writeHTTPSFiles(t)
	cfg := DevConfig()
	cfg.DataDir, cfg.Ports = t.TempDir(), Ports{}
	cfg.TLS = TLSConfig{HTTP: true, CAFile: other.CA, CertFile: f.Cert, KeyFile: f.Key}
	a, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start()
	if err == nil {
		_ = a.Shutdown()
		t.Fatal("agent started with a certificate its CA did not sign")
	}
	if !errors.Is(err, tlsutil.ErrNotSignedByCA) || !strings.Contains(err.Error(), "tls.http") {
		t.Fatalf("Start: %v, want tls.http ... ErrNotSignedByCA", err)
	}
}

func TestParseConfigTLSHTTP(t *testing.T) {
	c, err := ParseConfig("t.hcl", []byte(`
data_dir = "/x"
tls {
  http = true
  verify_https_client = true
  ca_file = "ca.pem"
  cert_file = "c.pem"
  key_file = "k.pem"
}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLS.HTTP || !c.TLS.VerifyHTTPSClient || c.TLS.RPC || c.TLS.CAFile != "ca.pem" || c.HTTPScheme() != "https" {
		t.Fatalf("tls = %+v", c.TLS)
	}
	for src, want := range map[string]string{
		`tls { http = true }`:                        "tls.http needs ca_file, cert_file and key_file",
		`tls { verify_https_client = true }`:         "tls.verify_https_client needs tls.http = true",
		"tls {\n http = true\n ca_file = \"x\"\n}":   "tls.http needs ca_file",
		`tls { http = "yes please" }`:                "t.hcl:1",
		`tls { verify_https_client = "yes" }`:        "t.hcl:1",
		"tls {\n http = true\n cert_file = \"x\"\n}": "tls.http needs",
	} {
		c, err := ParseConfig("t.hcl", []byte(src))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}

// A server-only agent forwards task logs and exec to the client node that
// runs the allocation over HTTPS, presenting its own certificate to the
// node (verify_https_client on both); the official client, given a CLI
// certificate, only ever talks to the server.
func TestHTTPSForwardsToClientNode(t *testing.T) {
	f := writeHTTPSFiles(t)
	tune := func(c *Config) {
		c.TLS.HTTP, c.TLS.VerifyHTTPSClient = true, true
		c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile = f.CA, f.Cert, f.Key
	}
	srv := startAgentWith(t, t.TempDir(), func(c *Config) {
		tune(c)
		c.Cluster.Client = false
		c.NodeName = "https-server"
	})
	t.Cleanup(func() { _ = srv.Shutdown() })
	cl := startAgentWith(t, t.TempDir(), func(c *Config) {
		tune(c)
		c.Cluster.Server, c.Cluster.Servers = false, []string{srv.RPCAddr()}
		c.NodeName = "https-client"
	})
	// Runs before srv's shutdown (LIFO): the job stops on the client
	// node, then the client goes.
	t.Cleanup(func() { _ = cl.Shutdown() })
	t.Cleanup(func() { stopAndWait(srv.Backend(), apitest.OfficialClientJobID) })
	apitest.ExerciseOfficialClientConfig(t, &nomad.Config{Address: "https://" + srv.HTTPAddr(),
		TLSConfig: &nomad.TLSConfig{CACert: f.CA, ClientCert: f.CLICert, ClientKey: f.CLIKey}})
	// Before the exercise's purge (LIFO), while the job's allocations can
	// still be waited for.
	t.Cleanup(func() { stopAndWait(srv.Backend(), apitest.OfficialClientJobID) })
}

// stopAndWait stops a job and waits (up to hang) for its allocations to
// end, so that no task outlives the test.
func stopAndWait(b api.Backend, jobID string) {
	if _, err := b.StopJob(context.Background(), jobID, false); err != nil {
		return
	}
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		allocs, _ := b.JobAllocations(context.Background(), jobID)
		done := true
		for _, al := range allocs {
			done = done && al.TerminalStatus()
		}
		if done {
			return
		}
	}
}
