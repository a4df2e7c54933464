package meshtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/sidecar"
	"github.com/meshlet/meshlet/xds"
)

// gateway is an ingress gateway allocation: its catalog registration and
// its built-in proxy, whose listeners come from the ingress-gateway entry.
type gateway struct {
	id, name string
	proxy    *sidecar.Proxy
}

// newHTTPInstance starts an HTTP app answering "<name> <Host>" behind a
// sidecar over its allocation's socket.
func (m *mesh) newHTTPInstance(service string) *instance {
	m.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", service, r.Host)
	}))
	m.t.Cleanup(srv.Close)
	in := &instance{name: service, service: service, publicPort: freePort(m.t), appPort: srv.Listener.Addr().(*net.TCPAddr).Port}
	in.fill()
	in.sock = connect.SocketPath(filepath.Join(m.sockDir, service))
	m.register(in)
	m.startSidecar(in)
	return in
}

// startGateway writes the gateway's entry, registers it and starts its
// proxy the way the injected connect-ingress task runs it (node ID = the
// gateway's service ID, cluster = its name).
func (m *mesh) startGateway(entry *consul.IngressGatewayConfigEntry) *gateway {
	m.t.Helper()
	set, idx := m.entries.Current()
	if err := set.Check(entry); err != nil {
		m.t.Fatal(err)
	}
	m.entries.Replace(set.With(entry), idx+1)
	gw := &gateway{id: connect.ServiceID("gw-alloc", "gw", entry.Name, "8080"), name: entry.Name}
	m.cat.Register(catalog.ServiceInstance{ID: gw.id, Name: gw.name, Kind: catalog.KindIngressGateway, Address: "127.0.0.1",
		Port: entry.Listeners[0].Port, AllocID: "gw-alloc", Datacenter: "dc1", Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: gw.name}})
	p, err := sidecar.New(sidecar.Config{ProxyID: gw.id, Cluster: gw.name, XDSAddr: m.grpcAddr, AdminBind: "127.0.0.1:0",
		Delta: true, DrainTimeout: time.Second, Logger: testLogger("gw")})
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

// getVia sends GET / with host to the gateway's http listener.
func getVia(port int, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+loopback(port)+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// The built-in proxy as an ingress gateway: a tcp listener forwards to db,
// an http listener routes by Host header to api, both over mTLS with the
// gateway's identity, which the destinations' intentions judge like any
// source's.
func TestIngressGatewayBuiltinProxy(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	api := m.newHTTPInstance("api")
	tcpPort, httpPort := freePort(t), freePort(t)
	gw := m.startGateway(&consul.IngressGatewayConfigEntry{Kind: configentry.IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
		{Port: tcpPort, Protocol: "tcp", Services: []consul.IngressService{{Name: "db"}}},
		{Port: httpPort, Protocol: "http", Services: []consul.IngressService{{Name: "api"}}},
	}})
	if got := adminGet(t, gw.proxy, "/listeners"); !containsAll(got, xds.IngressListenerName("tcp", "0.0.0.0", tcpPort), xds.IngressListenerName("http", "0.0.0.0", httpPort)) {
		t.Fatalf("gateway /listeners = %q", got)
	}

	var greeting string
	testutil.WaitFor(t, waitTimeout, "a connection through the gateway's tcp listener to reach db", func() bool {
		c, err := dialLine(loopback(tcpPort))
		if err != nil {
			return false
		}
		defer c.Close()
		greeting, err = c.readLine()
		return err == nil
	})
	if greeting != "db-0" {
		t.Fatalf("greeting through the gateway = %q, want db-0", greeting)
	}
	host := fmt.Sprintf("api.ingress.meshlet:%d", httpPort)
	var code int
	var body string
	testutil.WaitFor(t, waitTimeout, "an HTTP request through the gateway to reach api", func() bool {
		var err error
		code, body, err = getVia(httpPort, host)
		return err == nil && code == http.StatusOK
	})
	if body != "api "+host {
		t.Fatalf("api answered %q", body)
	}
	if code, _, err := getVia(httpPort, "other.example.com"); err != nil || code != http.StatusNotFound {
		t.Fatalf("unknown host: %d, %v; want 404", code, err)
	}
	if n := stat(t, api.proxy, authzPrefix+"ok"); n < 1 {
		t.Fatalf("api's sidecar authorized %d connections, want the gateway's", n)
	}

	// A deny from the gateway's identity to db refuses new tcp connections.
	if _, err := m.cp.Intentions.Upsert(intention.Intention{SourceName: "ingress", DestinationName: "db", Action: "deny"}, false); err != nil {
		t.Fatal(err)
	}
	conns := m.dbs[0].app.Conns()
	c, err := dialLine(loopback(tcpPort))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.expectClosed("secret"); err != nil {
		t.Fatalf("denied connection: %v", err)
	}
	c.Close()
	if m.dbs[0].app.Conns() != conns {
		t.Fatal("db's app saw a denied connection")
	}
	if n := stat(t, m.dbs[0].proxy, authzPrefix+"denied"); n < 1 {
		t.Fatalf("db's sidecar denied %d connections", n)
	}
	// The deny names db only: api still answers through the gateway.
	if code, _, err := getVia(httpPort, host); err != nil || code != http.StatusOK {
		t.Fatalf("api after the deny to db: %d, %v", code, err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
