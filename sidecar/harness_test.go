package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// waitTimeout is a hang guard for eventual conditions, not a performance bar.
const waitTimeout = 30 * time.Second

func testLogger() hclog.Logger {
	if os.Getenv("MESHLET_TEST_LOG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: os.Stderr})
}

// startProxy starts an in-process proxy and stops it at cleanup.
func startProxy(t testing.TB, nodeID, cluster, xdsAddr string, delta bool) *Proxy {
	t.Helper()
	p, err := New(Config{
		ProxyID: nodeID, Cluster: cluster, XDSAddr: xdsAddr, AdminBind: "127.0.0.1:0",
		Delta: delta, DrainTimeout: 500 * time.Millisecond, Logger: testLogger().Named(nodeID),
	})
	if err != nil {
		t.Fatalf("failed to create proxy: %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("failed to start proxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("failed to close proxy %s: %v", nodeID, err)
		}
	})
	return p
}

// dbNode is one instance of the "db" service: an echo app behind a sidecar
// with an mTLS public listener.
type dbNode struct {
	nodeID string
	port   int
	app    *echotest.App
	leaf   *testLeaf
	proxy  *Proxy
}

func (d *dbNode) publicAddr() string { return fmt.Sprintf("127.0.0.1:%d", d.port) }

// mesh is web -> db: web's sidecar (delta xDS over TCP) has an upstream
// listener to db; each db sidecar (state-of-the-world over the unix socket)
// has a public listener in front of its echo app.
type mesh struct {
	t       testing.TB
	cp      *controlPlane
	ca      *testCA
	roots   []*testCA
	webLeaf *testLeaf
	webPort int
	web     *Proxy
	dbs     []*dbNode
}

type meshOptions struct {
	dbs        int    // db instances; 1 if zero
	dbIdentity string // service name in the db leaf's SPIFFE ID; "db" if empty
	greetless  bool   // echo apps do not greet (benchmarks)
}

func newMesh(t testing.TB, opts meshOptions) *mesh {
	t.Helper()
	if opts.dbs == 0 {
		opts.dbs = 1
	}
	if opts.dbIdentity == "" {
		opts.dbIdentity = "db"
	}
	m := &mesh{t: t, cp: newControlPlane(t), ca: newTestCA(t, "root-1")}
	m.roots = []*testCA{m.ca}
	m.webLeaf = m.ca.leaf(t, spiffeID("web"))
	m.webPort = freePort(t)
	for i := 0; i < opts.dbs; i++ {
		id := fmt.Sprintf("db-%d", i)
		if opts.greetless {
			id = ""
		}
		m.dbs = append(m.dbs, &dbNode{
			nodeID: fmt.Sprintf("db-sidecar-proxy-%d", i), port: freePort(t),
			app: echotest.Start(t, id), leaf: m.ca.leaf(t, spiffeID(opts.dbIdentity)),
		})
	}
	m.web = startProxy(t, "web-sidecar-proxy", "web", m.cp.tcpAddr, true)
	for _, d := range m.dbs {
		d.proxy = startProxy(t, d.nodeID, "db", m.cp.unixAddr(), false)
	}
	m.push()
	m.waitReady()
	return m
}

func (m *mesh) webResources() map[string][]types.Resource {
	var addrs []string
	for _, d := range m.dbs {
		addrs = append(addrs, d.publicAddr())
	}
	return map[string][]types.Resource{
		typeListener: {upstreamListener("db", m.webPort, tcpProxyFilter(m.t, "upstream.db", sniFor("db")))},
		typeCluster:  {upstreamCluster(m.t, "db", "leaf", "roots")},
		typeEndpoint: {cla(sniFor("db"), addrs...)},
		typeSecret:   {certSecret("leaf", m.webLeaf), rootsSecret("roots", m.roots...)},
	}
}

func (m *mesh) dbResources(d *dbNode) map[string][]types.Resource {
	return map[string][]types.Resource{
		typeListener: {publicListener(m.t, d.port, "leaf", "roots", tcpProxyFilter(m.t, "public_listener", "local_app"))},
		typeCluster:  {localAppCluster(d.app.Addr())},
		typeSecret:   {certSecret("leaf", d.leaf), rootsSecret("roots", m.roots...)},
	}
}

// push publishes every node's snapshot.
func (m *mesh) push() {
	m.t.Helper()
	m.cp.set(m.web.cfg.ProxyID, m.webResources())
	for _, d := range m.dbs {
		m.cp.set(d.nodeID, m.dbResources(d))
	}
}

func (m *mesh) waitReady() {
	m.t.Helper()
	testutil.WaitFor(m.t, waitTimeout, "web ready", m.web.Ready)
	for _, d := range m.dbs {
		testutil.WaitFor(m.t, waitTimeout, d.nodeID+" ready", d.proxy.Ready)
	}
}

func (m *mesh) webAddr() string { return fmt.Sprintf("127.0.0.1:%d", m.webPort) }

// waitAccepted waits until p has accepted version of a type.
func waitAccepted(t testing.TB, p *Proxy, typeURL, version string) {
	t.Helper()
	testutil.WaitFor(t, waitTimeout, fmt.Sprintf("%s to accept %s version %s", p.cfg.ProxyID, kindOf(typeURL).short, version), func() bool {
		v, _ := p.store.accepted(typeURL)
		return v == version
	})
}

// lineConn is a test client connection reading lines.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(t testing.TB, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("failed to dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{Conn: c, r: bufio.NewReader(c)}
}

// readLine reads one line (without "\n") within a hang guard.
func (c *lineConn) readLine() (string, error) {
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

// exchange sends msg and returns the echoed line.
func (c *lineConn) exchange(t testing.TB, msg string) string {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("failed to write: %v", err)
	}
	got, err := c.readLine()
	if err != nil {
		t.Fatalf("failed to read the echo of %q: %v", msg, err)
	}
	return got
}

// greet dials web's upstream listener and returns the connection and the
// db instance's greeting.
func (m *mesh) greet(t testing.TB) (*lineConn, string) {
	t.Helper()
	c := dialLine(t, m.webAddr())
	id, err := c.readLine()
	if err != nil {
		t.Fatalf("failed to read the greeting through web -> db: %v", err)
	}
	return c, id
}

// parseClusters fetches /clusters and returns "<cluster>::<host>::<stat>"
// -> numeric value for every numeric line.
func parseClusters(t testing.TB, p *Proxy) map[string]int64 {
	t.Helper()
	body := adminGet(t, p, "/clusters", http.StatusOK)
	out := map[string]int64{}
	for _, line := range strings.Split(body, "\n") {
		i := strings.LastIndex(line, "::")
		if i < 0 {
			continue
		}
		if n, err := strconv.ParseInt(line[i+2:], 10, 64); err == nil {
			out[line[:i]] = n
		}
	}
	return out
}

// adminGet fetches an admin path and checks the status code.
func adminGet(t testing.TB, p *Proxy, path string, wantCode int) string {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: failed to read the body: %v", path, err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s = %d (%s), want %d", path, resp.StatusCode, b, wantCode)
	}
	return string(b)
}

// pushAndWait publishes every node's snapshot and waits until every proxy
// accepted it for typeURL.
func (m *mesh) pushAndWait(typeURL string) {
	m.t.Helper()
	v := m.cp.set(m.web.cfg.ProxyID, m.webResources())
	waitAccepted(m.t, m.web, typeURL, v)
	for _, d := range m.dbs {
		v := m.cp.set(d.nodeID, m.dbResources(d))
		waitAccepted(m.t, d.proxy, typeURL, v)
	}
}
