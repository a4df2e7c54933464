package sidecar

import (
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestDecodeCircuitBreakersAndOutlierDetection(t *testing.T) {
	c := edsTestCluster()
	cfg, err := decodeCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.circuit != (thresholds{1024, 1024, 1024, 3}) || cfg.outlier != nil {
		t.Errorf("defaults: circuit %+v outlier %+v", cfg.circuit, cfg.outlier)
	}
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{
		{Priority: corev3.RoutingPriority_HIGH, MaxConnections: wrapperspb.UInt32(1)},
		{MaxConnections: wrapperspb.UInt32(7), MaxRequests: wrapperspb.UInt32(9)},
	}}
	c.OutlierDetection = &clusterv3.OutlierDetection{BaseEjectionTime: durationpb.New(time.Second), MaxEjectionPercent: wrapperspb.UInt32(100)}
	if cfg, err = decodeCluster(c); err != nil {
		t.Fatal(err)
	}
	if cfg.circuit != (thresholds{maxConns: 7, maxPending: 1024, maxRequests: 9, maxRetries: 3}) {
		t.Errorf("circuit = %+v (HIGH priority ignored, unset = 1024, max_retries 3)", cfg.circuit)
	}
	want := outlierConfig{consecutive5xx: 5, interval: 10 * time.Second, baseEjectionTime: time.Second,
		maxEjectionTime: 300 * time.Second, maxEjectionPercent: 100, enforcing5xx: 100}
	if cfg.outlier == nil || *cfg.outlier != want {
		t.Errorf("outlier = %+v, want %+v", cfg.outlier, want)
	}
	c.OutlierDetection = &clusterv3.OutlierDetection{MaxEjectionPercent: wrapperspb.UInt32(101)}
	if _, err := decodeCluster(c); err == nil || !strings.Contains(err.Error(), "max_ejection_percent") {
		t.Errorf("max_ejection_percent 101: err = %v", err)
	}
}

func edsTestCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 "api",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ResourceApiVersion:    corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
	}
}

// outlierCluster is a round-robin cluster of n hosts with outlier detection.
func outlierCluster(n int, od outlierConfig) (*cluster, *clusterState) {
	c, st := lbCluster(lbRoundRobin, n)
	st.cfg.outlier = &od
	c.outlier = newOutlierStats(newStatsRegistry(), "api")
	return c, st
}

// Consecutive failures eject a host: it goes last in every pick, for
// base_ejection_time × the number of its ejections; a success in between
// resets the count; at most max_ejection_percent of hosts (but always one)
// are ejected.
func TestOutlierEjection(t *testing.T) {
	od := outlierConfig{consecutive5xx: 3, interval: time.Hour, baseEjectionTime: 150 * time.Millisecond,
		maxEjectionTime: time.Hour, maxEjectionPercent: 10, enforcing5xx: 100}
	c, st := outlierCluster(3, od)
	bad, other := st.hosts[0], st.hosts[1]
	c.outlierResult(st, bad, true)
	c.outlierResult(st, bad, true)
	c.outlierResult(st, bad, false) // a success resets the count
	c.outlierResult(st, bad, true)
	c.outlierResult(st, bad, true)
	if bad.stats.outlier.ejected(time.Now()) {
		t.Fatal("ejected after two consecutive failures")
	}
	c.outlierResult(st, bad, true)
	if !bad.stats.outlier.ejected(time.Now()) {
		t.Fatal("not ejected after three consecutive failures")
	}
	for i := 0; i < 6; i++ {
		cands := c.candidates(st, lbContext{}, nil)
		if cands[0] == bad || cands[len(cands)-1] != bad {
			t.Fatalf("pick %d: candidates %s, want the ejected host last", i, addrsOf(cands))
		}
	}
	// 10 % of 3 hosts: one host may be ejected, a second may not.
	for i := 0; i < 3; i++ {
		c.outlierResult(st, other, true)
	}
	if other.stats.outlier.ejected(time.Now()) {
		t.Error("a second host was ejected beyond max_ejection_percent")
	}
	if c.outlier.overflow.Load() != 1 {
		t.Errorf("ejections_overflow = %d, want 1", c.outlier.overflow.Load())
	}
	time.Sleep(od.baseEjectionTime + 20*time.Millisecond)
	if bad.stats.outlier.ejected(time.Now()) {
		t.Fatal("still ejected after base_ejection_time")
	}
	// The second ejection lasts twice as long (the interval is long, so
	// the multiplier has not decayed).
	for i := 0; i < 3; i++ {
		c.outlierResult(st, bad, true)
	}
	until := time.Unix(0, bad.stats.outlier.ejectedUntil.Load())
	if d := time.Until(until); d < 2*od.baseEjectionTime-50*time.Millisecond || d > 2*od.baseEjectionTime {
		t.Errorf("second ejection lasts %v, want about %v", d, 2*od.baseEjectionTime)
	}
}

// Every host ejected (max_ejection_percent 100): all still get picked, in
// policy order (Envoy's panic mode), so requests are not refused.
func TestOutlierAllEjected(t *testing.T) {
	c, st := outlierCluster(2, outlierConfig{consecutive5xx: 1, interval: time.Hour, baseEjectionTime: time.Hour,
		maxEjectionTime: time.Hour, maxEjectionPercent: 100, enforcing5xx: 100})
	for _, h := range st.hosts {
		c.outlierResult(st, h, true)
		if !h.stats.outlier.ejected(time.Now()) {
			t.Fatalf("%s not ejected", h.ep.addr)
		}
	}
	if cands := c.candidates(st, lbContext{}, nil); len(cands) != 2 {
		t.Fatalf("candidates = %s, want both hosts", addrsOf(cands))
	}
}

// enforcing_consecutive_5xx 0: failures are counted but never eject.
func TestOutlierNotEnforced(t *testing.T) {
	c, st := outlierCluster(2, outlierConfig{consecutive5xx: 1, interval: time.Hour, baseEjectionTime: time.Hour,
		maxEjectionTime: time.Hour, maxEjectionPercent: 100, enforcing5xx: 0})
	for i := 0; i < 20; i++ {
		c.outlierResult(st, st.hosts[0], true)
	}
	if st.hosts[0].stats.outlier.ejected(time.Now()) {
		t.Fatal("ejected with enforcing_consecutive_5xx 0")
	}
}

// The circuit's counters: max_requests and max_pending_requests refuse
// beyond their limit and count overflows; releases reopen.
func TestCircuitCounters(t *testing.T) {
	cb := newCircuit(newStatsRegistry(), "api")
	cb.setLimits(thresholds{maxConns: 1, maxPending: 1, maxRequests: 2})
	admitted := 0
	for i := 0; i < 3; i++ {
		if cb.acquireRequest() {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("max_requests 2 admitted %d of 3", admitted)
	}
	cb.releaseRequest()
	if !cb.acquireRequest() {
		t.Fatal("a released request slot was not reused")
	}
	if !cb.acquireConn() || cb.acquireConn() {
		t.Fatal("max_connections 1 did not admit exactly one")
	}
	wake := cb.waitCh()
	if !cb.enterPending() || cb.enterPending() {
		t.Fatal("max_pending_requests 1 did not admit exactly one")
	}
	cb.releaseConn()
	select {
	case <-wake:
	default:
		t.Fatal("releasing a connection did not wake the pending request")
	}
	cb.leavePending()
	if cb.rqPendingOverflow.Load() != 2 || cb.cxOverflow.Load() != 1 {
		t.Errorf("overflows: rq_pending %d cx %d, want 2 and 1", cb.rqPendingOverflow.Load(), cb.cxOverflow.Load())
	}
}
