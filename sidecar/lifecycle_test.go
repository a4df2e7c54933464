package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// A half-close crosses both proxies (plain TCP and TLS CloseWrite): the
// client's EOF reaches the app, whose reply and EOF come back.
func TestHalfCloseThroughMesh(t *testing.T) {
	m := newMesh(t, meshOptions{})
	c, _ := m.greet(t)
	if _, err := io.WriteString(c, "last words\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	rest, err := io.ReadAll(c.r)
	if err != nil || string(rest) != "last words\n" {
		t.Fatalf("after half-close read %q, %v; want the echo then EOF", rest, err)
	}
}

// A listener that left LDS stops accepting at once, and its open connections
// are closed after the drain timeout.
func TestListenerRemovedDrains(t *testing.T) {
	m := newMesh(t, meshOptions{})
	long, _ := m.greet(t)
	res := m.webResources()
	res[typeListener] = nil
	v := m.cp.set(m.web.cfg.ProxyID, res)
	waitAccepted(t, m.web, typeListener, v)
	testutil.WaitFor(t, waitTimeout, "the removed listener to refuse connections", func() bool {
		c, err := net.DialTimeout("tcp", m.webAddr(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	if _, err := long.readLine(); err == nil {
		t.Fatal("the open connection of a removed listener was not closed after the drain")
	}
	if strings.Contains(adminGet(t, m.web, "/listeners", http.StatusOK), "db:") {
		t.Fatal("/listeners still lists the removed listener")
	}
}

// A listener that references an unknown cluster warms: the proxy is not
// ready and config_dump shows a warming state, until the cluster arrives.
func TestListenerWarmsUntilClusterKnown(t *testing.T) {
	cp := newControlPlane(t)
	ca := newTestCA(t, "root")
	app := echotest.Start(t, "app")
	port := freePort(t)
	partial := map[string][]types.Resource{
		typeListener: {upstreamListener("late", port, tcpProxyFilter(t, "upstream.late", "late_cluster"))},
		typeCluster:  {localAppCluster(app.Addr())},
		typeSecret:   {rootsSecret("roots", ca)},
	}
	v := cp.set("warm-proxy", partial)
	p := startProxy(t, "warm-proxy", "warm", cp.tcpAddr, true)
	waitAccepted(t, p, typeListener, v)
	if p.Ready() {
		t.Fatal("ready although the only listener is warming")
	}
	adminGet(t, p, "/ready", http.StatusServiceUnavailable)
	if n := statValue(t, p, "listener_manager.total_listeners_warming"); n != 1 {
		t.Fatalf("warming listeners = %d, want 1", n)
	}
	if !strings.Contains(adminGet(t, p, "/config_dump", http.StatusOK), `"warming_state"`) {
		t.Fatal("config_dump shows no warming_state")
	}

	late := localAppCluster(app.Addr())
	late.Name = "late_cluster"
	partial[typeCluster] = append(partial[typeCluster], late)
	cp.set("warm-proxy", partial)
	testutil.WaitFor(t, waitTimeout, "the listener to warm", p.Ready)
	c := dialLine(t, fmt.Sprintf("127.0.0.1:%d", port))
	if id, err := c.readLine(); err != nil || id != "app" {
		t.Fatalf("through the warmed listener: %q, %v", id, err)
	}
}

// Run serves until its context ends, then returns nil.
func TestRunStopsOnCancel(t *testing.T) {
	cp := newControlPlane(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{ProxyID: "run-proxy", XDSAddr: cp.unixAddr(), AdminBind: admin, Delta: true, DrainTimeout: 100 * time.Millisecond})
	}()
	testutil.WaitFor(t, waitTimeout, "the admin listener", func() bool {
		resp, err := http.Get("http://" + admin + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
}

// A changed listener serves new connections with the new filter chain and
// drains the connections of the old one (closed after the drain timeout).
func TestChangedListenerDrainsOldConnections(t *testing.T) {
	m := newMesh(t, meshOptions{})
	old, _ := m.greet(t)
	res := m.webResources()
	res[typeListener] = []types.Resource{upstreamListener("db", m.webPort, tcpProxyFilter(t, "upstream.db.v2", sniFor("db")))}
	v := m.cp.set(m.web.cfg.ProxyID, res)
	waitAccepted(t, m.web, typeListener, v)

	c, id := m.greet(t)
	if got := c.exchange(t, "new chain"); id != "db-0" || got != "new chain" {
		t.Fatalf("new connection: greeting %q echo %q", id, got)
	}
	if n := statValue(t, m.web, "tcp.upstream.db.v2.downstream_cx_total"); n != 1 {
		t.Fatalf("new filter chain served %d connections, want 1", n)
	}
	if _, err := old.readLine(); err == nil {
		t.Fatal("the old filter chain's connection was not drained")
	}
	if got := c.exchange(t, "still open"); got != "still open" {
		t.Fatalf("the new connection was drained too: %q", got)
	}
}

// TestOnReadyCalledOnce: Config.OnReady runs once, when the initial
// configuration is applied, not again on later updates.
func TestOnReadyCalledOnce(t *testing.T) {
	var calls atomic.Int32
	cp := newControlPlane(t)
	ca := newTestCA(t, "root")
	app := echotest.Start(t, "")
	p, err := New(Config{ProxyID: "db-sidecar-proxy", Cluster: "db", XDSAddr: cp.tcpAddr, AdminBind: "127.0.0.1:0",
		Logger: testLogger(), OnReady: func() { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	res := func(port int) map[string][]types.Resource {
		return map[string][]types.Resource{
			typeListener: {publicListener(t, port, "leaf", "roots", tcpProxyFilter(t, "public_listener", "local_app"))},
			typeCluster:  {localAppCluster(app.Addr())},
			typeSecret:   {certSecret("leaf", ca.leaf(t, spiffeID("db"))), rootsSecret("roots", ca)},
		}
	}
	cp.set("db-sidecar-proxy", res(freePort(t)))
	testutil.WaitFor(t, waitTimeout, "OnReady called", func() bool { return calls.Load() >= 1 })
	cp.set("db-sidecar-proxy", res(freePort(t)))
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnReady called %d times, want once", n)
	}
}
