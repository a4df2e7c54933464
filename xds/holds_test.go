package xds

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestLeafHeldWhileRegistered: one CA hold per service while a proxy or a
// connect app of it is registered; released when the last one leaves.
func TestLeafHeldWhileRegistered(t *testing.T) {
	e := newEnv(t, hclog.Error)
	e.cat.Register(testProxy("p1", "web", 21000, nil))
	e.cat.Register(testProxy("p2", "web", 21001, nil))
	e.plain("n1", "native", "127.0.0.1", 7000)
	e.cat.Register(catalog.ServiceInstance{ID: "l1", Name: "legacy", Address: "127.0.0.1", Port: 7001, Healthy: true})
	e.waitProxy("p1", 21000)
	e.waitProxy("p2", 21001)
	testutil.WaitFor(t, hangGuard, "holds taken", func() bool {
		return e.ca.holdCount("web") == 1 && e.ca.holdCount("native") == 1
	})
	if n := e.ca.holdCount("legacy"); n != 0 {
		t.Fatalf("a service without connect holds %d leaves", n)
	}
	if err := e.cat.Deregister("p1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hangGuard, "p1 removed", func() bool {
		return e.srv.cache.get(listenerType, "p1", PublicListenerName(21000)) == nil
	})
	if n := e.ca.holdCount("web"); n != 1 {
		t.Fatalf("web holds = %d with p2 still registered, want 1", n)
	}
	for _, id := range []string{"p2", "n1"} {
		if err := e.cat.Deregister(id); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, hangGuard, "holds released", func() bool {
		return e.ca.holdCount("web") == 0 && e.ca.holdCount("native") == 0
	})
}

// TestDeregisterReleasesCALeaf: with the real CA, a deregistered service's
// leaf and its renewal goroutine go; Stop releases the rest.
func TestDeregisterReleasesCALeaf(t *testing.T) {
	m, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cat := catalog.New()
	s, err := NewServer(Config{Catalog: cat, Certs: m, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cat.Register(testProxy("p1", "web", 21000, nil))
	cat.Register(testProxy("p2", "api", 21001, nil))
	testutil.WaitFor(t, hangGuard, "leaves issued and held", func() bool {
		return s.cache.has(secretType, "", LeafSecretName("web")) && s.cache.has(secretType, "", LeafSecretName("api")) &&
			m.LeafStats() == ca.LeafStats{Cached: 2, Held: 2, Renewing: 2}
	})
	if err := cat.Deregister("p1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hangGuard, "web's leaf released", func() bool {
		return !s.cache.has(secretType, "", LeafSecretName("web")) && m.LeafStats() == ca.LeafStats{Cached: 1, Held: 1, Renewing: 1}
	})
	s.Stop()
	testutil.WaitFor(t, hangGuard, "every leaf released at Stop", func() bool { return m.LeafStats() == ca.LeafStats{} })
}

// TestDisconnectKeepsLeafOfRegisteredProxy: a stream that ends does not
// release its proxy's leaf while the proxy is registered (the sidecar
// reconnects to it), and a node that is no registered proxy holds nothing.
func TestDisconnectKeepsLeafOfRegisteredProxy(t *testing.T) {
	e := newEnv(t, hclog.Error)
	e.proxy("p1", "web", "127.0.0.1", 21000)
	e.waitProxy("p1", 21000)
	c, ghost := e.dial("p1", false), e.dial("ghost", false)
	c.req(listenerType, nil, "", "", "")
	c.ack(c.next(listenerType))
	ghost.req(listenerType, nil, "", "", "")
	ghost.nack(ghost.next(listenerType), "") // gives the ghost a status entry
	testutil.WaitFor(t, hangGuard, "connected", func() bool {
		return e.srv.ProxyStatus("p1").Connected && e.srv.ProxyError("ghost") != nil
	})
	c.close()
	ghost.close()
	testutil.WaitFor(t, hangGuard, "closed streams reconciled", func() bool {
		e.srv.statusMu.Lock()
		_, ok := e.srv.status["ghost"]
		e.srv.statusMu.Unlock()
		return !ok && !e.srv.ProxyStatus("p1").Connected
	})
	if n, g := e.ca.holdCount("web"), e.ca.holdCount("ghost"); n != 1 || g != 0 {
		t.Fatalf("holds after disconnect: web %d (want 1), ghost %d (want 0)", n, g)
	}
}

// TestProxyLosingDestinationReleasesHold: a proxy re-registered without a
// destination service (a config error) no longer holds its old service's
// leaf.
func TestProxyLosingDestinationReleasesHold(t *testing.T) {
	e := newEnv(t, hclog.Error)
	e.cat.Register(testProxy("p1", "web", 21000, nil))
	e.waitProxy("p1", 21000)
	testutil.WaitFor(t, hangGuard, "web held", func() bool { return e.ca.holdCount("web") == 1 })
	bad := testProxy("p1", "web", 21000, nil)
	bad.Proxy.DestinationServiceName = ""
	e.cat.Register(bad)
	testutil.WaitFor(t, hangGuard, "web released", func() bool { return e.ca.holdCount("web") == 0 })
}
