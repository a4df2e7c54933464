package meshtest

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/testutil"
)

// Test 5: the control plane stops while a connection streams. The sidecars
// serve their last configuration (fail-static): the open connection keeps
// going and new ones are authorized from the last decision per identity
// pair. A new control plane on the same data directory and addresses (the
// CA reloads its root, the client re-registers the catalog) gets both
// sidecars back — web over TCP, db over its re-served unix socket — and
// changes made afterwards take effect: a new db endpoint, a re-issued leaf,
// a deny intention.
func TestControlPlaneRestart(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	db := m.dbs[0]
	rootID := m.cp.CA.Roots().ActiveRootID
	long, _ := m.greet(t)
	s := startStreamer(t, long)
	s.progress(t, 20, "before the control plane stops")

	m.stopControlPlane()
	waitConnected(t, m, false)
	s.progress(t, 20, "while the control plane is down")
	stale := stat(t, db.proxy, authzPrefix+"stale_decision")
	for i := 0; i < 3; i++ {
		c, id := m.greet(t)
		if id != "db-0" {
			t.Fatalf("new connection %d during the outage reached %q", i, id)
		}
		c.exchange(t, "new during the outage")
		c.Close()
	}
	if n := stat(t, db.proxy, authzPrefix+"stale_decision"); n < stale+3 {
		t.Fatalf("%sstale_decision went from %d to %d, want +3 (authorized from the last decision); db's stats:\n%s",
			authzPrefix, stale, n, adminGet(t, db.proxy, "/stats?filter=ext_authz|control_plane"))
	}

	m.startControlPlane()
	if got := m.cp.CA.Roots().ActiveRootID; got != rootID {
		t.Fatalf("active root after the restart = %s, want %s reloaded from the data directory", got, rootID)
	}
	waitConnected(t, m, true)
	s.progress(t, 20, "after the control plane restarted")

	// xDS to db's sidecar (unix socket): the new CA's leaf for db arrives.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	testutil.WaitFor(t, waitTimeout, "db's sidecar to apply the new control plane's leaf", func() bool {
		leaf, err := m.cp.CA.Leaf(ctx, "db")
		return err == nil && servedLeaf(t, db.proxy, "db").Equal(parsePEM(t, leaf.CertPEM)[0])
	})
	// xDS to web's sidecar (TCP): a new db endpoint joins its round robin.
	db1 := m.newDB(1)
	m.dbs = append(m.dbs, db1)
	m.register(db1)
	m.startSidecar(db1)
	testutil.WaitFor(t, waitTimeout, "db-1's sidecar ready", db1.proxy.Ready)
	testutil.WaitFor(t, waitTimeout, "a new connection through web to reach db-1", func() bool {
		c, id := m.greet(t)
		c.Close()
		return id == "db-1"
	})

	// The open connection outlived the restart. (It is checked before the
	// deny below: the built-in proxy re-authorizes open connections and
	// cuts this one within its interval once the deny is in force.)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	long.exchange(t, "the open connection outlived the restart")

	// ext_authz reaches the new control plane: a deny applies (the last
	// decision, an allow, would otherwise be used).
	if _, err := m.cp.Intentions.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: "deny"}, false); err != nil {
		t.Fatalf("failed to upsert the deny intention: %v", err)
	}
	for i := 0; i < 2; i++ { // round robin: both db sidecars deny
		c, err := dialLine(m.webAddr())
		if err != nil {
			t.Fatal(err)
		}
		err = c.expectClosed("denied")
		c.Close()
		if err != nil {
			t.Fatalf("connection %d after the deny: %v", i, err)
		}
	}
	if n := stat(t, db.proxy, authzPrefix+"denied") + stat(t, db1.proxy, authzPrefix+"denied"); n < 2 {
		t.Fatalf("%sdenied = %d across db sidecars, want >= 2", authzPrefix, n)
	}
}

// waitConnected waits until web's and db-0's sidecars are (dis)connected
// from the control plane, as both sides see it.
func waitConnected(t testing.TB, m *mesh, want bool) {
	t.Helper()
	wantState := int64(0)
	if want {
		wantState = 1
	}
	for _, in := range []*instance{m.web, m.dbs[0]} {
		testutil.WaitFor(t, waitTimeout, in.name+"'s control plane connection state", func() bool {
			if stat(t, in.proxy, "control_plane.connected_state") != wantState {
				return false
			}
			return !want || m.cp.XDS.ProxyStatus(in.proxyID).Connected
		})
	}
}
