package sidecar

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// The retry circuit breaker (max_retries, Envoy's default 3 when the
// cluster sets none) bounds the retries in flight to a cluster: when ten
// requests fail at once, three are retried and the other seven get their
// failed answer at once, counted as upstream_rq_retry_overflow.
func TestCircuitMaxRetriesBoundsConcurrentRetries(t *testing.T) {
	const clients = 10
	var first, retried atomic.Int64
	arrived := make(chan struct{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := first.Add(1); n <= clients {
			if n == clients {
				close(arrived)
			}
			<-arrived // all ten fail together
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		retried.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	})
	api := subsetCluster("")
	route := clusterRoute("/", api, func(r *routev3.Route) {
		r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{503}, NumRetries: wrapperspb.UInt32(1)}
	})
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, handler: app}}, apiRoutes(route), l7Options{})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	codes := make(chan int, clients)
	for range clients {
		go func() {
			code, _, _, err := m.get(client, "/")
			if err != nil {
				code = -1
			}
			codes <- code
		}()
	}
	refused := 0
	deadline := time.After(waitTimeout)
	for refused < clients-3 {
		select {
		case code := <-codes:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("a request answered %d while the retries were held, want 503 (a retry refused)", code)
			}
			refused++
		case <-deadline:
			t.Fatalf("%d requests got their 503 and %d retries reached the app; want %d refused by max_retries 3", refused, retried.Load(), clients-3)
		}
	}
	testutil.WaitFor(t, waitTimeout, "3 retries at the app", func() bool { return retried.Load() >= 3 })
	time.Sleep(100 * time.Millisecond)
	if n := retried.Load(); n != 3 {
		t.Fatalf("%d retries reached the app, want 3 (max_retries)", n)
	}
	releaseOnce.Do(func() { close(release) })
	for range 3 {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a retried request answered %d, want 200", code)
		}
	}
	testutil.WaitFor(t, waitTimeout, "upstream_rq_retry_overflow at 7", func() bool {
		return statValue(t, m.web, "cluster."+api+".upstream_rq_retry_overflow") == clients-3
	})
}
