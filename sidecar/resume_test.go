package sidecar

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// statSum adds up the counters and gauges of p whose names match expr.
func statSum(t testing.TB, p *Proxy, expr string) int64 {
	t.Helper()
	var b strings.Builder
	if err := p.stats.writeText(&b, regexp.MustCompile(expr)); err != nil {
		t.Fatalf("stats: %v", err)
	}
	var sum int64
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if _, v, ok := strings.Cut(line, ": "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("stat line %q: %v", line, err)
			}
			sum += n
		}
	}
	return sum
}

// TestSessionResumptionKeepsChecks: a second connection between two
// sidecars resumes the first one's TLS session (counted on both sides); a
// resumed connection is still authorized (a deny closes it before the app
// sees it) and its peer still verified against the current roots (after
// the trust bundle drops the peers' CA, a resumable connection fails).
func TestSessionResumptionKeepsChecks(t *testing.T) {
	m := newMesh(t, meshOptions{})
	db := m.dbs[0]
	const clusterReused = `^cluster\..*\.ssl\.session_reused$`
	const listenerReused = `^listener\..*\.ssl\.session_reused$`

	c1, _ := m.greet(t)
	c1.Close()
	c2, id := m.greet(t)
	if got := c2.exchange(t, "resumed"); id != "db-0" || got != "resumed" {
		t.Fatalf("second connection: greeting %q echo %q", id, got)
	}
	c2.Close()
	if n := statSum(t, m.web, clusterReused); n < 1 {
		t.Fatalf("web's cluster resumed %d sessions, want >= 1", n)
	}
	before := statSum(t, db.proxy, listenerReused)
	if before < 1 {
		t.Fatalf("db's public listener resumed %d sessions, want >= 1", before)
	}

	// Authorization still runs on a resumed connection.
	m.cp.authz.setDeny(spiffeID("web"), true)
	appConns := db.app.Conns()
	c := dialLine(t, m.webAddr())
	if line, err := c.readLine(); err == nil {
		t.Fatalf("denied resumed connection read %q, want it closed", line)
	}
	c.Close()
	if n := statSum(t, db.proxy, listenerReused); n <= before {
		t.Fatalf("the denied connection did not resume (%d resumed before, %d after): the test proves nothing", before, n)
	}
	if n := statValue(t, db.proxy, "ext_authz.connect_authz.denied"); n < 1 {
		t.Fatalf("ext_authz denied = %d on a resumed connection, want >= 1", n)
	}
	if n := db.app.Conns(); n != appConns {
		t.Fatalf("the app accepted %d connections from a denied, resumed peer", n-appConns)
	}
	m.cp.authz.setDeny(spiffeID("web"), false)

	// The SPIFFE peer check still runs: with the peers' CA no longer
	// trusted, the ticket web holds must not get it a connection.
	failBefore := statSum(t, m.web, `^cluster\..*\.ssl\.fail_verify_error$`)
	m.roots = []*testCA{newTestCA(t, "root-other")}
	m.pushAndWait(typeSecret)
	c = dialLine(t, m.webAddr())
	if line, err := c.readLine(); err == nil {
		t.Fatalf("connection to a peer no longer trusted read %q, want it closed", line)
	}
	c.Close()
	if n := statSum(t, m.web, `^cluster\..*\.ssl\.fail_verify_error$`); n <= failBefore {
		t.Fatalf("web's upstream verification failures %d -> %d, want an increase", failBefore, n)
	}
}

// BenchmarkNewConnection is one new connection through web -> db per op:
// TCP connect, mTLS handshake between the sidecars (resumed or full),
// ext_authz, the app's greeting. cpu-µs/conn is the process's CPU (client,
// app and both sidecars).
func BenchmarkNewConnection(b *testing.B) {
	m := newMesh(b, meshOptions{})
	for _, resume := range []bool{false, true} {
		name := "full_handshake"
		if resume {
			name = "resumed"
		}
		b.Run(name, func(b *testing.B) {
			sessionResumption = resume
			defer func() { sessionResumption = true }()
			c, _ := m.greet(b) // a ticket for the resumed case
			c.Close()
			b.ReportAllocs()
			before := cpuTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, _ := m.greet(b)
				c.Close()
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/conn")
		})
	}
}
