package sidecar

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/meshlet/meshlet/internal/testutil"
	"google.golang.org/protobuf/types/known/anypb"
)

// Test 1: client -> web's upstream listener -> db's public listener (mTLS,
// authz allow) -> echo app, and back.
func TestMeshMTLSEcho(t *testing.T) {
	m := newMesh(t, meshOptions{})
	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting = %q, want db-0", id)
	}
	if got := c.exchange(t, "hello world"); got != "hello world" {
		t.Fatalf("echo = %q, want %q", got, "hello world")
	}
	req := m.cp.authz.lastRq.Load()
	if req == nil {
		t.Fatal("the authz service was never called")
	}
	if got := req.GetAttributes().GetSource().GetPrincipal(); got != spiffeID("web") {
		t.Errorf("authz source principal = %q, want %q", got, spiffeID("web"))
	}
	if got := req.GetAttributes().GetDestination().GetPrincipal(); got != spiffeID("db") {
		t.Errorf("authz destination principal = %q, want %q", got, spiffeID("db"))
	}
}

// statValue reads a counter or gauge, failing the test if it does not exist.
func statValue(t testing.TB, p *Proxy, name string) int64 {
	t.Helper()
	v, ok := p.stats.value(name)
	if !ok {
		t.Fatalf("%s has no stat %q", p.cfg.ProxyID, name)
	}
	return v
}

// Test 2: a denied source is cut off before any byte reaches the app; a
// later allow is honoured at once (every connection is checked).
func TestMeshAuthzDeny(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	m.cp.authz.setDeny(spiffeID("web"), true)

	c := dialLine(t, m.webAddr())
	if _, err := c.Write([]byte("secret payload\n")); err != nil {
		t.Logf("write failed early (fine): %v", err)
	}
	if line, err := c.readLine(); err == nil {
		t.Fatalf("denied connection read %q, want the connection closed", line)
	}
	if n := db.app.Conns(); n != 0 {
		t.Fatalf("the app accepted %d connections from a denied source", n)
	}
	if n := db.app.Bytes(); n != 0 {
		t.Fatalf("the app received %d bytes from a denied source", n)
	}
	if n := statValue(t, db.proxy, "ext_authz.connect_authz.denied"); n < 1 {
		t.Fatalf("ext_authz denied = %d, want >= 1", n)
	}

	m.cp.authz.setDeny(spiffeID("web"), false)
	c2, id := m.greet(t)
	if got := c2.exchange(t, "allowed now"); id != "db-0" || got != "allowed now" {
		t.Fatalf("after allow: greeting %q echo %q", id, got)
	}
}

// tlsProbe connects straight to addr with TLS (optionally presenting cert),
// then tries one echo round trip. It returns the error that stopped it, nil
// if the round trip worked, and the server's leaf.
func tlsProbe(t testing.TB, addr string, cert *testLeaf, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: sniFor("db"), MinVersion: tls.VersionTLS12}
	if roots == nil {
		cfg.InsecureSkipVerify = true // probing the server's client checks only
	} else {
		// SPIFFE certificates carry no DNS names: check the chain only.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	if cert != nil {
		pair, err := tls.X509KeyPair([]byte(cert.certPEM), []byte(cert.keyPEM))
		if err != nil {
			t.Fatalf("bad test key pair: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("failed to dial %s: %v", addr, err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(waitTimeout))
	c := tls.Client(raw, cfg)
	if err := c.Handshake(); err != nil {
		return nil, err
	}
	leaf := c.ConnectionState().PeerCertificates[0]
	// With TLS 1.3 the server rejects a client certificate after the
	// client's handshake completes: the first read tells.
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		return leaf, err
	}
	if _, err := io.WriteString(c, "probe\n"); err != nil {
		return leaf, err
	}
	_, err = r.ReadString('\n')
	return leaf, err
}

// Test 3: a client without a certificate, or with one from another CA, is
// refused by the public listener; the app sees nothing.
func TestPublicListenerRejectsUntrustedClients(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	otherCA := newTestCA(t, "other-root")
	cases := []struct {
		name string
		cert *testLeaf
	}{
		{"no certificate", nil},
		{"certificate from another CA", otherCA.leaf(t, spiffeID("web"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tlsProbe(t, db.publicAddr(), tc.cert, nil); err == nil {
				t.Fatal("the public listener served an untrusted client")
			}
		})
	}
	if n := db.app.Conns(); n != 0 {
		t.Fatalf("the app accepted %d connections from untrusted clients", n)
	}
	// The server counts the failure after the client already saw it.
	testutil.WaitFor(t, waitTimeout, "ssl.connection_error >= 2", func() bool {
		return statValue(t, db.proxy, "listener."+statName(db.publicAddr())+".ssl.connection_error") >= 2
	})
	// The control: a trusted client gets through.
	if _, err := tlsProbe(t, db.publicAddr(), m.webLeaf, nil); err != nil {
		t.Fatalf("trusted client: %v", err)
	}
}

// Test 4: an endpoint with a valid-CA certificate but the wrong SPIFFE ID is
// refused by web; the app behind it sees nothing.
func TestUpstreamImpostorRefused(t *testing.T) {
	m := newMesh(t, meshOptions{dbIdentity: "evil"})
	db := m.dbs[0]
	c := dialLine(t, m.webAddr())
	if line, err := c.readLine(); err == nil {
		t.Fatalf("read %q from an impostor, want the connection closed", line)
	}
	if n := db.app.Conns(); n != 0 {
		t.Fatalf("the impostor's app accepted %d connections", n)
	}
	if n := statValue(t, m.web, "cluster."+sniFor("db")+".ssl.fail_verify_san"); n < 1 {
		t.Fatalf("ssl.fail_verify_san = %d, want >= 1", n)
	}
}

// Test 5: round robin over two db endpoints; with one down, connections fail
// over to the other without a client-visible error.
func TestRoundRobinAndFailover(t *testing.T) {
	m := newMesh(t, meshOptions{dbs: 2})
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		c, id := m.greet(t)
		if got := c.exchange(t, "ping"); got != "ping" {
			t.Fatalf("echo = %q", got)
		}
		c.Close()
		seen[id]++
	}
	if seen["db-0"] == 0 || seen["db-1"] == 0 {
		t.Fatalf("round robin saw %v, want both db-0 and db-1", seen)
	}

	// db-1's sidecar goes away: its public port refuses connections.
	down := m.dbs[1]
	if err := down.proxy.Close(); err != nil {
		t.Fatalf("failed to stop db-1's sidecar: %v", err)
	}
	for i := 0; i < 6; i++ {
		c, id := m.greet(t)
		if id != "db-0" {
			t.Fatalf("connection %d reached %q, want db-0", i, id)
		}
		if got := c.exchange(t, "still here"); got != "still here" {
			t.Fatalf("echo = %q", got)
		}
		c.Close()
	}
	hosts := parseClusters(t, m.web)
	if n := hosts[sniFor("db")+"::"+down.publicAddr()+"::cx_connect_fail"]; n < 1 {
		t.Fatalf("cx_connect_fail of the dead endpoint = %d, want >= 1 (was it tried?)", n)
	}
}

// Test 6: rotate roots then leaves while a connection streams: it keeps
// working, and new connections see the new certificate.
func TestSecretRotation(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	oldLeaf := db.leaf
	long, _ := m.greet(t)
	stream := func(step string) {
		t.Helper()
		for i := 0; i < 20; i++ {
			msg := step + "-" + strconv.Itoa(i)
			if got := long.exchange(t, msg); got != msg {
				t.Fatalf("long-lived connection echoed %q, want %q", got, msg)
			}
		}
	}
	stream("before")
	leaf, err := tlsProbe(t, db.publicAddr(), m.webLeaf, caPool(m.ca))
	if err != nil || leaf.SerialNumber.Cmp(oldLeaf.cert.SerialNumber) != 0 {
		t.Fatalf("before rotation: err %v, serial %v want %v", err, leaf.SerialNumber, oldLeaf.cert.SerialNumber)
	}

	// Step 1: trust old and new roots everywhere.
	newCA := newTestCA(t, "root-2")
	m.roots = []*testCA{m.ca, newCA}
	m.pushAndWait(typeSecret)
	stream("roots")

	// Step 2: re-issue every leaf from the new root.
	m.webLeaf = newCA.leaf(t, spiffeID("web"))
	db.leaf = newCA.leaf(t, spiffeID("db"))
	m.pushAndWait(typeSecret)
	stream("leaves")

	leaf, err = tlsProbe(t, db.publicAddr(), m.webLeaf, caPool(newCA))
	if err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if leaf.SerialNumber.Cmp(db.leaf.cert.SerialNumber) != 0 {
		t.Fatalf("after rotation db presents serial %v, want the new leaf's %v", leaf.SerialNumber, db.leaf.cert.SerialNumber)
	}
	c, id := m.greet(t)
	if got := c.exchange(t, "fresh"); id != "db-0" || got != "fresh" {
		t.Fatalf("new connection after rotation: greeting %q echo %q", id, got)
	}
	stream("after")
}

func caPool(cas ...*testCA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.cert)
	}
	return p
}

// Test 7: with the control plane gone, open and new connections keep working
// on the last configuration; when it returns on the same addresses, both
// proxies reconnect and pick up a change.
func TestControlPlaneRestart(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	long, _ := m.greet(t)
	if got := long.exchange(t, "before"); got != "before" {
		t.Fatalf("echo = %q", got)
	}

	m.cp.stop()
	testutil.WaitFor(t, waitTimeout, "both proxies to notice the control plane is gone", func() bool {
		return statValue(t, m.web, "control_plane.connected_state") == 0 &&
			statValue(t, db.proxy, "control_plane.connected_state") == 0
	})
	if got := long.exchange(t, "during"); got != "during" {
		t.Fatalf("open connection during the outage echoed %q", got)
	}
	for i := 0; i < 3; i++ {
		c, id := m.greet(t)
		if got := c.exchange(t, "new during outage"); id != "db-0" || got != "new during outage" {
			t.Fatalf("new connection during the outage: greeting %q echo %q", id, got)
		}
		c.Close()
	}
	if n := statValue(t, db.proxy, "ext_authz.connect_authz.stale_decision"); n < 1 {
		t.Fatalf("stale_decision = %d, want >= 1 (authz fell back to the last decision)", n)
	}

	m.cp.start()
	// A change on each node: a second listener (existing ones are
	// unchanged, so their connections are not drained).
	webPort2, dbPort2 := freePort(t), freePort(t)
	webRes := m.webResources()
	webRes[typeListener] = append(webRes[typeListener], upstreamListener("db2", webPort2, tcpProxyFilter(t, "upstream.db2", sniFor("db"))))
	vw := m.cp.set(m.web.cfg.ProxyID, webRes)
	dbRes := m.dbResources(db)
	dbRes[typeListener] = append(dbRes[typeListener], publicListener(t, dbPort2, "leaf", "roots", tcpProxyFilter(t, "public_listener_2", "local_app")))
	vd := m.cp.set(db.nodeID, dbRes)
	waitAccepted(t, m.web, typeListener, vw)
	waitAccepted(t, db.proxy, typeListener, vd)

	c := dialLine(t, fmt.Sprintf("127.0.0.1:%d", webPort2))
	if id, err := c.readLine(); err != nil || id != "db-0" {
		t.Fatalf("web's new listener after the restart: %q, %v", id, err)
	}
	if _, err := tlsProbe(t, fmt.Sprintf("127.0.0.1:%d", dbPort2), m.webLeaf, caPool(m.ca)); err != nil {
		t.Fatalf("db's new listener after the restart: %v", err)
	}
	if got := long.exchange(t, "after"); got != "after" {
		t.Fatalf("open connection after the restart echoed %q", got)
	}
}

// bogusFilter is a network filter of a type the proxy does not implement.
func bogusFilter() *listenerv3.Filter {
	return &listenerv3.Filter{Name: "meshlet.test.bogus", ConfigType: &listenerv3.Filter_TypedConfig{
		TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/meshlet.test.Bogus", Value: []byte{}},
	}}
}

// Test 8: an invalid listener is NACKed with an error detail, the old
// configuration keeps serving, and a later valid update is applied (delta on
// web, state-of-the-world with NACK hold on db).
func TestNACKKeepsLastGoodConfig(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	badWeb := m.webResources()
	badL := upstreamListener("db", m.webPort, tcpProxyFilter(t, "upstream.db", sniFor("db")))
	badL.FilterChains[0].Filters = append([]*listenerv3.Filter{bogusFilter()}, badL.FilterChains[0].Filters...)
	badWeb[typeListener] = []types.Resource{badL}
	m.cp.set(m.web.cfg.ProxyID, badWeb)

	badDB := m.dbResources(db)
	badP := publicListener(t, db.port, "leaf", "roots", tcpProxyFilter(t, "public_listener", "local_app"))
	badP.FilterChains[0].Filters = append([]*listenerv3.Filter{bogusFilter()}, badP.FilterChains[0].Filters...)
	badDB[typeListener] = []types.Resource{badP}
	m.cp.set(db.nodeID, badDB)

	for _, node := range []string{m.web.cfg.ProxyID, db.nodeID} {
		testutil.WaitFor(t, waitTimeout, node+" to NACK the bad listener", func() bool {
			for _, n := range m.cp.nacksFor(node) {
				if n.typeURL == typeListener && strings.Contains(n.detail, "meshlet.test.Bogus") {
					return true
				}
			}
			return false
		})
	}
	for _, p := range []*Proxy{m.web, db.proxy} {
		if n := statValue(t, p, "control_plane.lds.update_rejected"); n < 1 {
			t.Fatalf("%s lds.update_rejected = %d, want >= 1", p.cfg.ProxyID, n)
		}
	}
	c, id := m.greet(t)
	if got := c.exchange(t, "old config"); id != "db-0" || got != "old config" {
		t.Fatalf("after NACK: greeting %q echo %q", id, got)
	}
	c.Close()

	// A fixed configuration is taken up again.
	m.pushAndWait(typeListener)
	c, _ = m.greet(t)
	if got := c.exchange(t, "fixed"); got != "fixed" {
		t.Fatalf("after the fix: echo %q", got)
	}
	if nacks := len(m.cp.nacksFor(db.nodeID)); nacks > 200 {
		t.Fatalf("db sent %d NACKs: the rejection loop was not held", nacks)
	}
}

// Test 9: the admin endpoints.
func TestAdminEndpoints(t *testing.T) {
	m := newMesh(t, meshOptions{dbs: 2})
	lonely := startProxy(t, "lonely-sidecar-proxy", "lonely", m.cp.tcpAddr, true)
	adminGet(t, lonely, "/ready", http.StatusServiceUnavailable)
	if body := adminGet(t, m.web, "/ready", http.StatusOK); strings.TrimSpace(body) != "LIVE" {
		t.Fatalf("/ready = %q, want LIVE", body)
	}

	cluster := sniFor("db")
	total := func() int64 {
		hosts := parseClusters(t, m.web)
		var sum int64
		for _, d := range m.dbs {
			key := cluster + "::" + d.publicAddr() + "::cx_total"
			n, ok := hosts[key]
			if !ok {
				t.Fatalf("/clusters has no %s", key)
			}
			sum += n
		}
		return sum
	}
	before := total()
	for i := 0; i < 2; i++ {
		c, _ := m.greet(t)
		c.Close()
	}
	if after := total(); after < before+2 {
		t.Fatalf("cx_total went from %d to %d after two connections", before, after)
	}
	body := adminGet(t, m.web, "/clusters", http.StatusOK)
	for _, want := range []string{
		cluster + "::" + m.dbs[0].publicAddr() + "::health_flags::healthy",
		cluster + "::" + m.dbs[1].publicAddr() + "::weight::1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/clusters lacks %q", want)
		}
	}

	stats := adminGet(t, m.web, "/stats", http.StatusOK)
	if !regexp.MustCompile(`(?m)^cluster\.` + regexp.QuoteMeta(cluster) + `\.upstream_cx_total: [1-9]`).MatchString(stats) {
		t.Errorf("/stats lacks a positive cluster.%s.upstream_cx_total", cluster)
	}

	var dump struct {
		Configs []map[string]json.RawMessage `json:"configs"`
	}
	raw := adminGet(t, m.web, "/config_dump", http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &dump); err != nil {
		t.Fatalf("/config_dump is not JSON: %v", err)
	}
	var listeners struct {
		DynamicListeners []struct {
			Name        string          `json:"name"`
			ActiveState json.RawMessage `json:"active_state"`
		} `json:"dynamic_listeners"`
	}
	found := false
	for _, c := range dump.Configs {
		if string(c["@type"]) == `"type.googleapis.com/envoy.admin.v3.ListenersConfigDump"` {
			found = true
			b, _ := json.Marshal(c)
			if err := json.Unmarshal(b, &listeners); err != nil {
				t.Fatalf("bad ListenersConfigDump: %v", err)
			}
		}
	}
	wantName := "db:127.0.0.1:" + strconv.Itoa(m.webPort)
	if !found || len(listeners.DynamicListeners) != 1 || listeners.DynamicListeners[0].Name != wantName || listeners.DynamicListeners[0].ActiveState == nil {
		t.Fatalf("config_dump listeners = %+v, want one active %q", listeners, wantName)
	}
	if strings.Contains(raw, "PRIVATE KEY") || !strings.Contains(raw, "[redacted]") {
		t.Fatal("config_dump does not redact private keys")
	}
}
