package xds

import (
	"net"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

// In a cluster the catalog also holds other nodes' proxies: the server
// builds config and holds leaves only for its own node's, while the
// other nodes' proxies are endpoints of its clusters.
func TestOnlyLocalProxiesAreServed(t *testing.T) {
	cat, tca := catalog.New(), newTestCA(t)
	s, err := NewServer(Config{Catalog: cat, Certs: tca, Datacenter: "dc1", Coalesce: 2 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: hclog.NewNullLogger(),
		LocalProxy: func(i catalog.ServiceInstance) bool { return i.NodeID == "n1" }})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)

	web := testProxy("web-1", "web", 21000, nil, catalog.Upstream{DestinationName: "db", LocalBindAddress: "127.0.0.1", LocalBindPort: 9000})
	web.NodeID = "n1"
	db := testProxy("db-1", "db", 21001, nil)
	db.NodeID, db.Address = "n2", "10.0.0.2"
	cat.Register(db)
	cat.Register(web)

	testutil.WaitFor(t, hangGuard, "the local proxy published with its leaf held", func() bool {
		return s.cache.get(listenerType, "web-1", PublicListenerName(21000)) != nil && tca.holdCount("web") == 1
	})
	name := ClusterName("db", "dc1", tca.TrustDomain())
	testutil.WaitFor(t, hangGuard, "the remote endpoint in the local proxy's upstream cluster", func() bool {
		cla, _ := s.cache.get(endpointType, "", name).(*endpoint.ClusterLoadAssignment)
		if cla == nil || len(cla.GetEndpoints()) != 1 || len(cla.GetEndpoints()[0].GetLbEndpoints()) != 1 {
			return false
		}
		sa := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		return sa.GetAddress() == "10.0.0.2" && sa.GetPortValue() == 21001
	})
	if got := s.cache.get(listenerType, "db-1", PublicListenerName(21001)); got != nil {
		t.Error("the other node's proxy got a listener built here")
	}
	if n := tca.holdCount("db"); n != 0 {
		t.Errorf("the other node's service leaf is held %d times, want 0 (its node's agent holds it)", n)
	}
	if s.expectProxy("db-1") || !s.expectProxy("web-1") {
		t.Error("expectProxy must accept only this node's proxies")
	}
	if _, err := s.allocGrant(peerInfo{kind: peerAlloc, allocID: db.AllocID}, "", "db-1"); err == nil {
		t.Error("an allocation socket may act as another node's proxy")
	}

	// Connect apps (native or behind a sidecar) hold their service's
	// leaf on their own node only: a remote one pins nothing here.
	cat.Register(catalog.ServiceInstance{ID: "api-1", Name: "api", NodeID: "n2", Address: "10.0.0.2", Port: 8080, Healthy: true, Connect: true})
	cat.Register(catalog.ServiceInstance{ID: "pay-1", Name: "pay", NodeID: "n1", Address: "10.0.0.1", Port: 8081, Healthy: true, Connect: true})
	testutil.WaitFor(t, hangGuard, "the local connect app's leaf held", func() bool { return tca.holdCount("pay") == 1 })
	// Both registrations were planned in the same or an earlier round
	// than the local one's hold: a remote hold would show by now.
	if n := tca.holdCount("api"); n != 0 {
		t.Errorf("another node's connect app has its leaf held %d times here, want 0", n)
	}
	// A remote instance next to a local one does not keep the hold once
	// the local one goes.
	cat.Register(catalog.ServiceInstance{ID: "pay-2", Name: "pay", NodeID: "n2", Address: "10.0.0.2", Port: 8081, Healthy: true, Connect: true})
	if err := cat.Deregister("pay-1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, hangGuard, "the leaf released with the last local connect app", func() bool { return tca.holdCount("pay") == 0 })
}
