package sidecar

import (
	"net"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// setWebCluster republishes web's resources with its db cluster changed.
func (m *mesh) setWebCluster(mod func(*clusterv3.Cluster)) {
	m.t.Helper()
	res := m.webResources()
	mod(res[typeCluster][0].(*clusterv3.Cluster))
	waitAccepted(m.t, m.web, typeCluster, m.cp.set(m.web.cfg.ProxyID, res))
}

// tcp_proxy under max_connections 1: a second connection is closed at
// once (upstream_cx_overflow); after the first closes, a new one passes.
func TestTCPCircuitBreakerMaxConnections(t *testing.T) {
	m := newMesh(t, meshOptions{})
	m.setWebCluster(withThresholds(&clusterv3.CircuitBreakers_Thresholds{MaxConnections: wrapperspb.UInt32(1)}))
	first, _ := m.greet(t)
	second, err := net.DialTimeout("tcp", m.webAddr(), waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(waitTimeout))
	if n, err := second.Read(make([]byte, 64)); err == nil {
		t.Fatalf("the second connection got %d bytes; want it closed by the circuit breaker", n)
	}
	if n := statValue(t, m.web, "cluster."+sniFor("db")+".upstream_cx_overflow"); n != 1 {
		t.Errorf("upstream_cx_overflow = %d, want 1", n)
	}
	first.Close()
	testutil.WaitFor(t, waitTimeout, "the connection slot released", func() bool {
		return statValue(t, m.web, "cluster."+sniFor("db")+".upstream_cx_active") == 0
	})
	c, _ := m.greet(t)
	if got := c.exchange(t, "again"); got != "again" {
		t.Fatalf("echo after the release = %q", got)
	}
	c.Close()
}

// Outlier detection counts connect failures: a db whose sidecar is gone
// is ejected after one failure and not tried again while ejected.
func TestTCPOutlierEjectsUnreachableEndpoint(t *testing.T) {
	m := newMesh(t, meshOptions{dbs: 2})
	m.setWebCluster(func(c *clusterv3.Cluster) {
		c.OutlierDetection = &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(1),
			BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: wrapperspb.UInt32(50)}
	})
	down := m.dbs[1]
	if err := down.proxy.Close(); err != nil {
		t.Fatalf("failed to stop db-1's sidecar: %v", err)
	}
	for i := 0; i < 8; i++ {
		c, id := m.greet(t)
		if id != "db-0" {
			t.Fatalf("connection %d reached %q", i, id)
		}
		c.Close()
	}
	hosts := parseClusters(t, m.web)
	if n := hosts[sniFor("db")+"::"+down.publicAddr()+"::cx_connect_fail"]; n != 1 {
		t.Fatalf("cx_connect_fail of the dead endpoint = %d, want exactly 1 (ejected after it)", n)
	}
}
