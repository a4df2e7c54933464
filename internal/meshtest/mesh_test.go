package meshtest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/xds"
)

// authzPrefix is the public listener's ext_authz stat prefix (Consul's).
const authzPrefix = "ext_authz.connect_authz."

// Tests 1 and 6: web's sidecar (xDS over TCP) and db's (xDS over its
// allocation's unix socket) get their config from the real control plane;
// bytes go client -> web's upstream listener -> mTLS -> db's public listener
// -> ext_authz -> echo app and back; db presents its CA-issued SPIFFE
// identity.
func TestMTLSEchoOverBothTransports(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	db := m.dbs[0]

	fi, err := os.Stat(db.sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("db's allocation socket %s: %v, mode %v", db.sock, err, fi.Mode())
	}
	for _, in := range m.all() {
		st := m.cp.XDS.ProxyStatus(in.proxyID)
		if !st.Connected || st.ConfigError != nil || len(st.Rejected) > 0 {
			t.Fatalf("%s's xDS status: %+v, want connected with no error", in.name, st)
		}
	}

	for in, want := range map[*instance]string{
		m.web: fmt.Sprintf("db:127.0.0.1:%d::127.0.0.1:%d", m.web.upstreams[0].LocalBindPort, m.web.upstreams[0].LocalBindPort),
		db:    fmt.Sprintf("public_listener:0.0.0.0:%d::0.0.0.0:%d", db.publicPort, db.publicPort),
	} {
		if got := adminGet(t, in.proxy, "/listeners"); !strings.Contains(got, want) {
			t.Fatalf("%s's /listeners = %q, want a line %q", in.name, got, want)
		}
	}

	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting through web = %q, want db-0", id)
	}
	c.exchange(t, "hello world")

	// Dial db's public listener as web would, with web's leaf from the CA.
	tc, err := probeTLS(m.cp, db.publicAddr(), "web")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	peer := tc.ConnectionState().PeerCertificates
	wantID := xds.SpiffeID(m.trustDomain, "dc1", "db")
	if len(peer) == 0 || len(peer[0].URIs) != 1 || peer[0].URIs[0].String() != wantID {
		t.Fatalf("db presents %v, want one certificate with URI SAN %s", peerURIs(peer), wantID)
	}
	if wantID != m.cp.CA.SpiffeID("db") {
		t.Fatalf("xds.SpiffeID %s differs from the CA's %s", wantID, m.cp.CA.SpiffeID("db"))
	}
	if err := verifyChain(peer, activeRoot(t, m.cp)); err != nil {
		t.Fatalf("db's certificate does not chain to the CA's active root: %v", err)
	}
	direct := &lineConn{Conn: tc, r: bufio.NewReader(tc)}
	if g, err := direct.readLine(); err != nil || g != "db-0" {
		t.Fatalf("direct mTLS greeting = %q, %v", g, err)
	}
	direct.exchange(t, "hello world")
	if n := stat(t, db.proxy, authzPrefix+"ok"); n < 2 {
		t.Fatalf("%sok = %d, want >= 2 (every connection is authorized)", authzPrefix, n)
	}
}

// A client whose certificate claims web's SPIFFE ID but is not issued by
// the CA is refused by db's public listener: no byte reaches the app.
func TestPublicListenerRefusesForeignCertificate(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	db := m.dbs[0]
	before := db.app.Conns()
	cert := selfSigned(t, xds.SpiffeID(m.trustDomain, "dc1", "web"))
	raw, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", db.publicAddr(),
		&tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // the client side is not under test
	if err == nil {
		// With TLS 1.3 the server's rejection of the client certificate
		// surfaces on the first read.
		c := &lineConn{Conn: raw, r: bufio.NewReader(raw)}
		err = c.expectClosed("hello")
		raw.Close()
		if err != nil {
			t.Fatalf("foreign certificate: %v", err)
		}
	}
	if got := db.app.Conns(); got != before {
		t.Fatalf("app accepted %d connections from a client with a foreign certificate", got-before)
	}
	name := fmt.Sprintf("listener.0.0.0.0_%d.ssl.connection_error", db.publicPort)
	testutil.WaitFor(t, waitTimeout, name+" >= 1", func() bool { return stat(t, db.proxy, name) >= 1 })
}

// Test 2: a deny intention closes new connections before the app sees a
// byte; deleting it lets them through again.
func TestIntentionDenyAndRestore(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	db := m.dbs[0]
	open, _ := m.greet(t)
	open.exchange(t, "before")
	conns, bytes := db.app.Conns(), db.app.Bytes()

	if _, err := m.cp.Intentions.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: "deny"}, false); err != nil {
		t.Fatalf("failed to upsert the deny intention: %v", err)
	}
	for i := 0; i < 3; i++ {
		c, err := dialLine(m.webAddr())
		if err != nil {
			t.Fatal(err)
		}
		err = c.expectClosed("secret")
		c.Close()
		if err != nil {
			t.Fatalf("denied connection %d: %v", i, err)
		}
	}
	if gotC, gotB := db.app.Conns(), db.app.Bytes(); gotC != conns || gotB != bytes {
		t.Fatalf("app saw %d new connections and %d new bytes while denied, want none", gotC-conns, gotB-bytes)
	}
	if n := stat(t, db.proxy, authzPrefix+"denied"); n < 3 {
		t.Fatalf("%sdenied = %d, want >= 3", authzPrefix, n)
	}

	if err := m.cp.Intentions.Delete("web", "db"); err != nil {
		t.Fatalf("failed to delete the intention: %v", err)
	}
	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting after the intention was deleted = %q", id)
	}
	c.exchange(t, "after")
}

// Test 3: round robin over two db endpoints; when one allocation stops
// (app and sidecar gone, catalog not yet updated) new connections fail over
// to the other without a client-visible error; once deregistered, the
// endpoint leaves web's EDS.
func TestRoundRobinAndFailover(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 2)
	seen := map[string]int{}
	for i := 0; i < 8; i++ {
		c, id := m.greet(t)
		c.exchange(t, "ping")
		c.Close()
		seen[id]++
	}
	if seen["db-0"] == 0 || seen["db-1"] == 0 || len(seen) != 2 {
		t.Fatalf("round robin reached %v, want both db-0 and db-1", seen)
	}

	down := m.dbs[1]
	down.app.Close()
	if err := down.proxy.Close(); err != nil {
		t.Fatalf("failed to stop db-1's sidecar: %v", err)
	}
	for i := 0; i < 8; i++ {
		c, id := m.greet(t)
		if id != "db-0" {
			t.Fatalf("connection %d after db-1 stopped reached %q, want db-0", i, id)
		}
		c.exchange(t, "still here")
		c.Close()
	}
	hosts := hostStats(t, m.web.proxy, m.dbCluster())
	if n := hosts[down.publicAddr()+"::cx_connect_fail"]; n < 1 {
		t.Fatalf("cx_connect_fail of the stopped endpoint = %d, want >= 1 (was it tried?); hosts %v", n, hosts)
	}

	m.deregister(down)
	testutil.WaitFor(t, waitTimeout, "db-1 to leave web's endpoints", func() bool {
		hosts := hostStats(t, m.web.proxy, m.dbCluster())
		_, stale := hosts[down.publicAddr()+"::cx_total"]
		_, live := hosts[m.dbs[0].publicAddr()+"::cx_total"]
		return live && !stale
	})
	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting after deregistration = %q", id)
	}
	c.exchange(t, "done")
}

func peerURIs(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		for _, u := range c.URIs {
			out = append(out, u.String())
		}
	}
	return out
}

// selfSigned makes a client certificate with a SPIFFE URI SAN that no
// trusted root signed.
func selfSigned(t testing.TB, spiffeID string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(spiffeID)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "web"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Test 3, app-only variant: db-1's app dies while its sidecar lives on.
// Nothing in the data path retries a connection that the remote sidecar
// accepted and then closed, so the instance must leave the endpoints: once
// the catalog marks it unhealthy (what a failing check does), web's EDS
// drops it and every new connection reaches db-0.
func TestUnhealthyEndpointLeavesRoundRobin(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 2)
	down := m.dbs[1]
	down.app.Close()
	for _, si := range down.registrations() {
		si.Healthy = false
		m.cat.Register(si)
	}
	testutil.WaitFor(t, waitTimeout, "db-1 to leave web's endpoints", func() bool {
		hosts := hostStats(t, m.web.proxy, m.dbCluster())
		_, stale := hosts[down.publicAddr()+"::cx_total"]
		_, live := hosts[m.dbs[0].publicAddr()+"::cx_total"]
		return live && !stale
	})
	for i := 0; i < 8; i++ {
		c, id := m.greet(t)
		if id != "db-0" {
			t.Fatalf("connection %d reached %q, want db-0", i, id)
		}
		c.exchange(t, "healthy only")
		c.Close()
	}
}

// Consul never re-authorizes open connections (#6454); meshlet's built-in
// proxy does: a connection opened while allowed is closed once a deny
// intention for its identity pair is in force.
func TestDenyClosesOpenConnections(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	open, _ := m.greet(t)
	open.exchange(t, "while allowed")

	if _, err := m.cp.Intentions.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: "deny"}, false); err != nil {
		t.Fatalf("failed to upsert the deny intention: %v", err)
	}
	testutil.WaitFor(t, waitTimeout, "the open connection to be closed after the deny", func() bool {
		return open.roundTrip("still there?") != nil
	})
	if n := stat(t, m.dbs[0].proxy, authzPrefix+"reauthorization_closed"); n < 1 {
		t.Fatalf("%sreauthorization_closed = %d, want >= 1", authzPrefix, n)
	}
}
