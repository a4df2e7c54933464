// Package meshgateway holds the single-agent end-to-end test of a mesh
// gateway: a job whose gateway group meshlet completes with a
// connect-mesh task, reached from the host's loopback as a mesh client
// reaches it. The two-datacenter test is e2e/cluster's
// TestMeshGatewaysAcrossDatacenters (it needs the cluster harness).
package meshgateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// jobWithPort writes input/meshgateway.hcl with the gateway's port set.
func jobWithPort(t *testing.T, port int) string {
	t.Helper()
	src, err := os.ReadFile("input/meshgateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meshgateway.hcl")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(src), "MESH_PORT", strconv.Itoa(port))), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// meshClient is a mesh caller: web's leaf from the agent, the mesh roots.
type meshClient struct {
	cert  tls.Certificate
	roots *x509.CertPool
	td    string
}

func newMeshClient(t *testing.T, a *framework.Agent, service string) *meshClient {
	t.Helper()
	roots, _, err := a.Consul().Agent().ConnectCARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCertPEM))
	}
	leaf, _, err := a.Consul().Agent().ConnectCALeaf(service, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	return &meshClient{cert: cert, roots: pool, td: roots.TrustDomain}
}

// echo dials the gateway with sni, completes mTLS with whoever answers
// (verified against the mesh roots) and echoes a line. It returns the
// SPIFFE ID the server presented.
func (m *meshClient) echo(addr, sni string) (string, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{
		ServerName: sni, Certificates: []tls.Certificate{m.cert}, RootCAs: m.roots, MinVersion: tls.VersionTLS12,
		// Mesh leaves carry SPIFFE URIs, not the SNI as a DNS name: verify
		// the chain here and let the test check the identity.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			opts := x509.VerifyOptions{Roots: m.roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	tc := c.(*tls.Conn)
	id := ""
	if uris := tc.ConnectionState().PeerCertificates[0].URIs; len(uris) == 1 {
		id = uris[0].String()
	}
	if _, err := fmt.Fprintln(c, "through the gateway"); err != nil {
		return id, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return id, err
	}
	if strings.TrimSpace(line) != "through the gateway" {
		return id, fmt.Errorf("echo = %q", line)
	}
	return id, nil
}

func TestMeshGateway(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	port := testutil.FreePort(t)
	job := a.RunJob(jobWithPort(t, port))
	allocs := a.RunningAllocs(job, 2)
	gw := a.AllocByGroup(allocs, "gateway")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	web := newMeshClient(t, a, "web")
	sni := "api.default.dc1.internal." + web.td

	var id string
	a.Eventually(60*time.Second, "mTLS to api's sidecar through the gateway", func() bool {
		var err error
		id, err = web.echo(addr, sni)
		return err == nil
	})
	if want := "spiffe://" + web.td + "/ns/default/dc/dc1/svc/api"; id != want {
		t.Errorf("the server behind the gateway is %q, want api's sidecar %q (the gateway must not terminate)", id, want)
	}
	if _, err := web.echo(addr, "db.default.dc1.internal."+web.td); err == nil {
		t.Error("a server name no chain matches got through the gateway")
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("the gateway's listener %s, which just served, refused a connection: %v", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	_, _ = fmt.Fprintln(c, "GET / HTTP/1.0")
	if n, _ := c.Read(make([]byte, 1)); n > 0 {
		t.Error("plaintext got an answer through the gateway")
	}
	c.Close()

	t.Run("inspection", func(t *testing.T) {
		out := a.MustCLI("alloc", "status", gw.ID)
		if !strings.Contains(out, `Task "connect-mesh-mesh-gateway"`) || !strings.Contains(out, "Mesh Gateway: mesh-gateway") {
			t.Errorf("alloc status lacks the gateway task:\n%s", out)
		}
		entries, _, err := a.Consul().Health().Service("mesh-gateway", "", false, nil)
		if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindMeshGateway {
			t.Fatalf("health/service/mesh-gateway = %+v, %v", entries, err)
		}
		tagged := entries[0].Service.TaggedAddresses
		if tagged["lan"].Port != entries[0].Service.Port || tagged["wan"].Port != entries[0].Service.Port {
			t.Errorf("tagged addresses %+v, service port %d", tagged, entries[0].Service.Port)
		}
	})

	// Intentions are judged at api's sidecar, with web's identity.
	a.MustCLI("intention", "create", "-deny", "web", "api")
	a.Eventually(10*time.Second, "the deny to refuse web", func() bool { _, err := web.echo(addr, sni); return err != nil })
	a.MustCLI("intention", "delete", "web", "api")
	a.Eventually(10*time.Second, "web allowed again", func() bool { _, err := web.echo(addr, sni); return err == nil })
}
