package meshtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/sidecar"
	"github.com/meshlet/meshlet/xds"
)

// waitTimeout is a hang guard for eventual conditions, not a performance bar.
const waitTimeout = 30 * time.Second

// instance is one allocation running a connect service: its app, the
// catalog entries the client registers for it, and its built-in sidecar.
type instance struct {
	name       string // "web", "db-0": the app's greeting
	service    string // "web", "db"
	allocID    string
	serviceID  string
	proxyID    string
	appPort    int
	publicPort int
	upstreams  []catalog.Upstream
	// sock is the allocation's control plane socket; empty: the sidecar
	// talks to the control plane's TCP gRPC address.
	sock string

	app   *echotest.App
	proxy *sidecar.Proxy
	// registered is false once the instance was deregistered.
	registered bool
}

// publicAddr is the sidecar's public listener as a loopback address.
func (in *instance) publicAddr() string { return loopback(in.publicPort) }

// registrations are the catalog entries the client registers for the
// allocation (see connect.Registrations).
func (in *instance) registrations() []catalog.ServiceInstance {
	app := catalog.ServiceInstance{
		ID: in.serviceID, Name: in.service, Address: "127.0.0.1", Port: in.appPort,
		AllocID: in.allocID, Datacenter: "dc1", Healthy: true, Connect: true,
	}
	proxy := catalog.ServiceInstance{
		ID: in.proxyID, Name: connect.ProxyServiceName(in.service), Kind: catalog.KindConnectProxy,
		Address: "127.0.0.1", Port: in.publicPort, AllocID: in.allocID, Datacenter: "dc1", Healthy: true,
		Proxy: &catalog.Proxy{
			DestinationServiceName: in.service,
			DestinationServiceID:   in.serviceID,
			LocalServiceAddress:    "127.0.0.1",
			LocalServicePort:       in.appPort,
			Upstreams:              in.upstreams,
		},
	}
	return []catalog.ServiceInstance{app, proxy}
}

// mesh is web -> db on the real control plane: web's sidecar speaks delta
// xDS over the control plane's TCP address and has an upstream listener to
// db; each db sidecar speaks over its allocation's unix socket and fronts an
// echo app that greets with the instance name.
type mesh struct {
	t        testing.TB
	dataDir  string
	sockDir  string
	grpcAddr string // fixed for the test, so a restarted control plane reuses it
	leafTTL  time.Duration

	cat *catalog.Catalog
	// entries are the config entries, kept across control plane restarts.
	entries *configentry.Registry
	// trustDomain is the CA's; it survives restarts (the CA reloads its
	// cluster ID from the data directory).
	trustDomain string
	cp          *controlplane.ControlPlane

	web *instance
	dbs []*instance
}

// newMesh starts a control plane, web and dbs db instances, and waits until
// traffic flows from web's upstream listener to a db app.
func newMesh(t testing.TB, dbs int) *mesh {
	t.Helper()
	return newMeshWith(t, dbs, 0)
}

// newMeshWith is newMesh with the CA's leaf TTL (0: the default, 72h).
func newMeshWith(t testing.TB, dbs int, leafTTL time.Duration) *mesh {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "mt") // short: unix socket paths are limited to 107 bytes
	if err != nil {
		t.Fatalf("failed to create the socket directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	m := &mesh{t: t, dataDir: t.TempDir(), sockDir: sockDir, grpcAddr: loopback(freePort(t)), leafTTL: leafTTL,
		entries: configentry.NewRegistry()}
	t.Cleanup(m.stopControlPlane) // after every proxy has closed (cleanups run last-in first-out)
	m.web = &instance{name: "web", service: "web", appPort: freePort(t), publicPort: freePort(t)}
	m.web.upstreams = []catalog.Upstream{{DestinationName: "db", LocalBindAddress: "127.0.0.1", LocalBindPort: freePort(t)}}
	m.web.fill()
	for i := 0; i < dbs; i++ {
		m.dbs = append(m.dbs, m.newDB(i))
	}
	m.startControlPlane()
	m.startSidecar(m.web)
	for _, db := range m.dbs {
		m.startSidecar(db)
	}
	m.waitReady()
	return m
}

// newDB prepares db instance i (its echo app runs; nothing registered yet).
func (m *mesh) newDB(i int) *instance {
	db := &instance{name: fmt.Sprintf("db-%d", i), service: "db", publicPort: freePort(m.t)}
	db.app = echotest.Start(m.t, db.name)
	db.appPort = db.app.Port()
	db.fill()
	db.sock = connect.SocketPath(filepath.Join(m.sockDir, db.name)) // where the agent puts it in the shared alloc dir
	return db
}

// fill sets the allocation's IDs the way the client names them.
func (in *instance) fill() {
	in.allocID = uuid.NewString()
	in.serviceID = connect.ServiceID(in.allocID, in.service, in.service, strconv.Itoa(in.appPort))
	in.proxyID = connect.ProxyID(in.serviceID)
	in.registered = true
}

func (m *mesh) all() []*instance { return append([]*instance{m.web}, m.dbs...) }

// startControlPlane starts a control plane on the mesh's data directory and
// gRPC address over a new catalog, registers every registered instance and
// serves the db allocations' sockets: what the agent does on (re)start.
func (m *mesh) startControlPlane() {
	m.t.Helper()
	cat := catalog.New()
	cp, err := controlplane.New(controlplane.Config{
		DataDir: m.dataDir, DefaultAllow: true, GRPCAddr: m.grpcAddr, HTTPAddr: "127.0.0.1:0",
		LeafTTL: m.leafTTL, Logger: testLogger("cp"), ConfigEntries: m.entries,
	}, cat)
	if err != nil {
		m.t.Fatalf("failed to build the control plane: %v", err)
	}
	if err := cp.Start(); err != nil {
		m.t.Fatalf("failed to start the control plane: %v", err)
	}
	m.cp, m.cat = cp, cat
	if m.trustDomain == "" {
		m.trustDomain = cp.CA.TrustDomain()
	}
	for _, in := range m.all() {
		m.register(in)
	}
}

// register puts an instance in the catalog and serves its socket.
func (m *mesh) register(in *instance) {
	m.t.Helper()
	if !in.registered {
		return
	}
	for _, si := range in.registrations() {
		m.cat.Register(si)
	}
	if in.sock != "" {
		if err := m.cp.ServeAllocSocket(in.allocID, in.sock, "", in.registrations()[1:]); err != nil {
			m.t.Fatalf("failed to serve %s's socket: %v", in.name, err)
		}
	}
}

// deregister removes an instance from the catalog (its allocation stopped).
func (m *mesh) deregister(in *instance) {
	m.t.Helper()
	in.registered = false
	m.cat.DeregisterAlloc(in.allocID)
	m.cp.RemoveAllocSocket(in.allocID)
}

// stopControlPlane stops the running control plane, if any.
func (m *mesh) stopControlPlane() {
	if m.cp != nil {
		m.cp.Stop()
		m.cp = nil
	}
}

// startSidecar starts in's built-in proxy: over the allocation's socket
// when it has one, else over the TCP gRPC address.
func (m *mesh) startSidecar(in *instance) {
	m.t.Helper()
	addr := m.grpcAddr
	if in.sock != "" {
		addr = "unix://" + in.sock
	}
	p, err := sidecar.New(sidecar.Config{
		ProxyID: in.proxyID, Cluster: in.service, XDSAddr: addr, AdminBind: "127.0.0.1:0",
		Delta: true, DrainTimeout: time.Second, Logger: testLogger(in.name),
	})
	if err != nil {
		m.t.Fatalf("failed to create %s's sidecar: %v", in.name, err)
	}
	if err := p.Start(context.Background()); err != nil {
		m.t.Fatalf("failed to start %s's sidecar: %v", in.name, err)
	}
	in.proxy = p
	m.t.Cleanup(func() {
		if err := p.Close(); err != nil {
			m.t.Errorf("failed to close %s's sidecar: %v", in.name, err)
		}
	})
}

// waitReady waits for every sidecar's initial configuration, for web's
// endpoints of db to list every registered db instance, and for a first
// connection through web to reach a db app.
func (m *mesh) waitReady() {
	m.t.Helper()
	for _, in := range m.all() {
		if in.proxy != nil {
			testutil.WaitFor(m.t, waitTimeout, in.name+"'s sidecar ready", in.proxy.Ready)
		}
	}
	testutil.WaitFor(m.t, waitTimeout, "web's endpoints of db to list every db instance", func() bool {
		hosts := hostStats(m.t, m.web.proxy, m.dbCluster())
		for _, db := range m.dbs {
			if _, ok := hosts[db.publicAddr()+"::cx_total"]; ok != db.registered {
				return false
			}
		}
		return true
	})
	testutil.WaitFor(m.t, waitTimeout, "a connection through web to reach db", func() bool {
		c, err := dialLine(m.webAddr())
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.readLine()
		return err == nil
	})
}

// webAddr is web's upstream listener for db.
func (m *mesh) webAddr() string { return loopback(m.web.upstreams[0].LocalBindPort) }

// dbCluster is the name of web's upstream cluster (and EDS) for db.
func (m *mesh) dbCluster() string {
	return xds.ClusterName("db", "dc1", m.trustDomain)
}

// greet dials web's upstream listener and returns the connection and the
// greeting of the db instance it reached.
func (m *mesh) greet(t testing.TB) (*lineConn, string) {
	t.Helper()
	c, err := dialLine(m.webAddr())
	if err != nil {
		t.Fatalf("failed to dial web's upstream listener: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	id, err := c.readLine()
	if err != nil {
		t.Fatalf("failed to read a db greeting through web: %v", err)
	}
	return c, id
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// testLogger is silent unless MESHLET_TEST_LOG is set.
func testLogger(name string) hclog.Logger {
	if os.Getenv("MESHLET_TEST_LOG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: os.Stderr})
}

func freePort(t testing.TB) int { return testutil.FreePort(t) }
