package sidecar

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// blockingApp answers /slow only once release is closed (counting the
// requests it holds) and anything else at once.
func blockingApp(held *atomic.Int32, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			held.Add(1)
			defer held.Add(-1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		fmt.Fprint(w, "ok")
	})
}

// getAsync runs m.get in the background; the channel gets its status or
// error.
func getAsync(m *l7Mesh, client *http.Client, path string) <-chan string {
	out := make(chan string, 1)
	go func() {
		code, body, _, err := m.get(client, path)
		if err != nil {
			out <- err.Error()
			return
		}
		out <- fmt.Sprintf("%d %s", code, body)
	}()
	return out
}

func withThresholds(th *clusterv3.CircuitBreakers_Thresholds) func(*clusterv3.Cluster) {
	return func(c *clusterv3.Cluster) {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
}

// max_requests: with two requests in flight, a third is refused at once
// with 503 and x-envoy-overloaded: true (Envoy's local reply); once they
// finish, requests pass again.
func TestCircuitBreakerMaxRequests(t *testing.T) {
	api := subsetCluster("")
	var held atomic.Int32
	release := make(chan struct{})
	rc := apiRoutes(clusterRoute("/", api, nil))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: blockingApp(&held, release)}}, rc, l7Options{})
	v := m.setWeb(rc, withThresholds(&clusterv3.CircuitBreakers_Thresholds{MaxRequests: wrapperspb.UInt32(2)}))
	waitAccepted(t, m.web, typeCluster, v)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	slow := []<-chan string{getAsync(m, client, "/slow"), getAsync(m, client, "/slow")}
	testutil.WaitFor(t, waitTimeout, "two requests held by the app", func() bool { return held.Load() == 2 })
	start := time.Now()
	code, body, hdr, err := m.get(client, "/fast")
	if err != nil || code != http.StatusServiceUnavailable || hdr.Get("X-Envoy-Overloaded") != "true" || !strings.Contains(body, "overflow") {
		t.Fatalf("third request = %d %q %v (x-envoy-overloaded %q), want 503 overloaded", code, body, err, hdr.Get("X-Envoy-Overloaded"))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the overflow took %v; Envoy refuses at once", d)
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_rq_pending_overflow"); n != 1 {
		t.Errorf("upstream_rq_pending_overflow = %d, want 1", n)
	}
	close(release)
	for _, ch := range slow {
		if got := <-ch; got != "200 ok" {
			t.Errorf("held request = %s", got)
		}
	}
	if code, body, _, err := m.get(client, "/fast"); err != nil || code != 200 || body != "ok" {
		t.Fatalf("after the held requests: %d %q %v", code, body, err)
	}
}

// max_connections 1, max_pending_requests 1: the second request waits for
// the only connection and then reuses it; a third overflows.
func TestCircuitBreakerMaxConnectionsAndPending(t *testing.T) {
	api := subsetCluster("")
	var held atomic.Int32
	release := make(chan struct{})
	rc := apiRoutes(clusterRoute("/", api, nil))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: blockingApp(&held, release)}}, rc, l7Options{})
	v := m.setWeb(rc, withThresholds(&clusterv3.CircuitBreakers_Thresholds{
		MaxConnections: wrapperspb.UInt32(1), MaxPendingRequests: wrapperspb.UInt32(1)}))
	waitAccepted(t, m.web, typeCluster, v)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	first := getAsync(m, client, "/slow")
	testutil.WaitFor(t, waitTimeout, "first request held", func() bool { return held.Load() == 1 })
	second := getAsync(m, client, "/fast")
	testutil.WaitFor(t, waitTimeout, "second request pending", func() bool {
		return statValue(t, m.web, "cluster."+api+".upstream_rq_pending_active") == 1
	})
	code, _, hdr, err := m.get(client, "/fast")
	if err != nil || code != http.StatusServiceUnavailable || hdr.Get("X-Envoy-Overloaded") != "true" {
		t.Fatalf("third request = %d %v, want 503 overloaded", code, err)
	}
	select {
	case got := <-second:
		t.Fatalf("the pending request finished before a connection was free: %s", got)
	default:
	}
	close(release)
	for name, ch := range map[string]<-chan string{"first": first, "second": second} {
		if got := <-ch; got != "200 ok" {
			t.Errorf("%s request = %s", name, got)
		}
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_cx_total"); n != 1 {
		t.Errorf("upstream_cx_total = %d, want 1 (the pending request reused the connection)", n)
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_cx_overflow"); n < 1 {
		t.Errorf("upstream_cx_overflow = %d, want >= 1", n)
	}
}

// flakyApp answers 500 while failing is set, else its name.
func flakyApp(name string, failing *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, name+" failed")
			return
		}
		fmt.Fprint(w, name)
	})
}

// outlier_detection: an instance answering 500 is ejected after
// consecutive_5xx failures (no request reaches it while ejected) and
// comes back after base_ejection_time.
func TestOutlierDetectionEjectsAndRestores(t *testing.T) {
	api := subsetCluster("")
	var failing atomic.Bool
	failing.Store(true)
	rc := apiRoutes(clusterRoute("/", api, nil))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: versionApp("good", 0)}, {cluster: api, handler: flakyApp("bad", &failing)}}, rc, l7Options{})
	const ejection = 1500 * time.Millisecond
	v := m.setWeb(rc, func(c *clusterv3.Cluster) {
		c.OutlierDetection = &clusterv3.OutlierDetection{
			Consecutive_5Xx:    wrapperspb.UInt32(3),
			Interval:           durationpb.New(time.Second),
			BaseEjectionTime:   durationpb.New(ejection),
			MaxEjectionPercent: wrapperspb.UInt32(50),
		}
	})
	waitAccepted(t, m.web, typeCluster, v)
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	failures := 0
	for i := 0; i < 10; i++ {
		code, _, _, err := m.get(client, "/")
		if err != nil {
			t.Fatal(err)
		}
		if code != 200 {
			failures++
		}
	}
	if failures != 3 {
		t.Fatalf("%d failed requests, want exactly 3 (consecutive_5xx) before the ejection", failures)
	}
	ejectedAt := time.Now()
	if n := statValue(t, m.web, "cluster."+api+".outlier_detection.ejections_enforced_total"); n != 1 {
		t.Errorf("ejections_enforced_total = %d, want 1", n)
	}
	for time.Since(ejectedAt) < ejection*2/3 {
		if code, body, _, err := m.get(client, "/"); err != nil || code != 200 || body != "good" {
			t.Fatalf("while ejected: %d %q %v, want only the good instance", code, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	failing.Store(false)
	testutil.WaitFor(t, ejection+waitTimeout, "the ejected instance back in the pool", func() bool {
		_, body, _, _ := m.get(client, "/")
		return body == "bad"
	})
	if d := time.Since(ejectedAt); d < ejection*9/10 {
		t.Errorf("the instance came back after %v, before base_ejection_time %v", d, ejection)
	}
}
