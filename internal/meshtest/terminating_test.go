package meshtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/sidecar"
	"github.com/meshlet/meshlet/xds"
)

// startTerminating writes a terminating-gateway entry, registers the
// gateway on 127.0.0.1:port and starts its built-in proxy the way the
// injected connect-terminating task runs it.
func (m *mesh) startTerminating(entry *consul.TerminatingGatewayConfigEntry, port int) *gateway {
	m.t.Helper()
	set, idx := m.entries.Current()
	if err := set.Check(entry); err != nil {
		m.t.Fatal(err)
	}
	m.entries.Replace(set.With(entry), idx+1)
	gw := &gateway{id: connect.ServiceID("tgw-alloc", "gw", entry.Name, "tgw"), name: entry.Name}
	m.cat.Register(catalog.ServiceInstance{ID: gw.id, Name: gw.name, Kind: catalog.KindTerminatingGateway, Address: "127.0.0.1",
		Port: port, AllocID: "tgw-alloc", Datacenter: "dc1", Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: gw.name}})
	p, err := sidecar.New(sidecar.Config{ProxyID: gw.id, Cluster: gw.name, XDSAddr: m.grpcAddr, AdminBind: "127.0.0.1:0",
		Delta: true, DrainTimeout: time.Second, Logger: testLogger("tgw")})
	if err != nil {
		m.t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = p.Close() })
	gw.proxy = p
	testutil.WaitFor(m.t, waitTimeout, "the gateway ready", p.Ready)
	return gw
}

// newClient starts a mesh service with a sidecar and upstreams to dests.
func (m *mesh) newClient(name string, dests ...string) *instance {
	m.t.Helper()
	in := &instance{name: name, service: name, appPort: freePort(m.t), publicPort: freePort(m.t)}
	for _, d := range dests {
		in.upstreams = append(in.upstreams, catalog.Upstream{DestinationName: d, LocalBindAddress: "127.0.0.1", LocalBindPort: freePort(m.t)})
	}
	in.fill()
	m.register(in)
	m.startSidecar(in)
	testutil.WaitFor(m.t, waitTimeout, name+"'s sidecar ready", in.proxy.Ready)
	return in
}

// external registers an instance of service outside the mesh (no
// sidecar), as /v1/catalog/register does.
func (m *mesh) external(service string, port int) {
	m.cat.Register(catalog.ServiceInstance{ID: service + "-ext", Name: service, Address: "127.0.0.1", Port: port,
		Datacenter: "dc1", Healthy: true})
}

// The built-in proxy as a terminating gateway: a mesh client's upstream to
// a service outside the mesh goes through the gateway, which presents the
// service's identity (its intentions judge the client) and forwards to the
// service's catalog address; with a CA file it originates TLS with SNI.
func TestTerminatingGatewayBuiltinProxy(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	ext := echotest.Start(t, "ext-0")
	m.external("ext", ext.Port())
	tlsSrv := startTLSGreeter(t, "ext-tls")
	m.external("ext-tls", tlsSrv.port)
	client := m.newClient("client", "ext", "ext-tls")
	gwPort := freePort(t)
	gw := m.startTerminating(&consul.TerminatingGatewayConfigEntry{Kind: configentry.TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{
		{Name: "ext"},
		{Name: "ext-tls", CAFile: tlsSrv.caFile, SNI: "ext-tls.example"},
	}}, gwPort)
	if got := adminGet(t, gw.proxy, "/listeners"); !containsAll(got, xds.TerminatingListenerName(gwPort)) {
		t.Fatalf("gateway /listeners = %q", got)
	}
	extAddr, tlsAddr := loopback(client.upstreams[0].LocalBindPort), loopback(client.upstreams[1].LocalBindPort)
	for _, tc := range []struct{ addr, want string }{{extAddr, "ext-0"}, {tlsAddr, "ext-tls"}} {
		var greeting string
		testutil.WaitFor(t, waitTimeout, "a connection through the gateway to reach "+tc.want, func() bool {
			c, err := dialLine(tc.addr)
			if err != nil {
				return false
			}
			defer c.Close()
			greeting, _ = c.readLine()
			return greeting == tc.want
		})
	}
	if sni := tlsSrv.lastSNI(); sni != "ext-tls.example" {
		t.Errorf("the external TLS server saw SNI %q", sni)
	}
	if n := stat(t, gw.proxy, authzPrefix+"ok"); n < 1 {
		t.Fatalf("the gateway authorized %d connections", n)
	}
	served := servedLeaf(t, gw.proxy, "ext")
	if len(served.URIs) != 1 || served.URIs[0].String() != xds.SpiffeID(m.trustDomain, "dc1", "ext") {
		t.Fatalf("the gateway's leaf for ext is %v", served.URIs)
	}

	held, err := dialLine(extAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if g, err := held.readLine(); err != nil || g != "ext-0" {
		t.Fatalf("held connection greeting %q, %v", g, err)
	}
	held.exchange(t, "while allowed")

	// A deny client -> ext refuses new connections at the gateway and
	// closes the open one (the gateway re-authorizes like a sidecar);
	// ext-tls still answers.
	if _, err := m.cp.Intentions.Upsert(intention.Intention{SourceName: "client", DestinationName: "ext", Action: "deny"}, false); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitTimeout, "the open connection through the gateway to be closed after the deny", func() bool {
		return held.roundTrip("still there?") != nil
	})
	if n := stat(t, gw.proxy, authzPrefix+"reauthorization_closed"); n < 1 {
		t.Fatalf("the gateway closed %d connections on re-authorization", n)
	}
	conns := ext.Conns()
	c, err := dialLine(extAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.expectClosed("secret"); err != nil {
		t.Fatalf("denied connection: %v", err)
	}
	c.Close()
	if ext.Conns() != conns {
		t.Fatal("the external service saw a denied connection")
	}
	if n := stat(t, gw.proxy, authzPrefix+"denied"); n < 1 {
		t.Fatalf("the gateway denied %d connections", n)
	}
	c, err = dialLine(tlsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if g, err := c.readLine(); err != nil || g != "ext-tls" {
		t.Fatalf("ext-tls after the deny to ext: %q, %v", g, err)
	}
}

// tlsGreeter is a TLS server outside the mesh (a test CA's certificate for
// ext-tls.example) that greets each connection and records the SNI.
type tlsGreeter struct {
	port   int
	caFile string
	mu     sync.Mutex
	sni    string
}

func (g *tlsGreeter) lastSNI() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sni
}

func startTLSGreeter(t *testing.T, greeting string) *tlsGreeter {
	t.Helper()
	caPEM, caKey, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCert(caPEM, caKey, tlsutil.CertOptions{Role: tlsutil.RoleServer, DNSNames: []string{"ext-tls.example"}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	g := &tlsGreeter{caFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(g.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			g.mu.Lock()
			g.sni = h.ServerName
			g.mu.Unlock()
			return nil, nil
		}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	g.port = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(waitTimeout))
				if _, err := c.Write([]byte(greeting + "\n")); err != nil {
					return
				}
				_, _ = bufio.NewReader(c).ReadString('\n')
			}()
		}
	}()
	return g
}
