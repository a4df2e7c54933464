package sidecar

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/meshlet/meshlet/internal/testutil"
)

// BenchmarkProxyTCP measures an echo round trip of a 16 KiB chunk straight
// to the app and through web -> (mTLS) -> db. ns/op is the round-trip time,
// MB/s the echoed throughput.
func BenchmarkProxyTCP(b *testing.B) {
	const chunk = 16 << 10
	m := newMesh(b, meshOptions{greetless: true})
	targets := []struct {
		name string
		addr string
	}{
		{"direct", m.dbs[0].app.Addr()},
		{"two_proxies", m.webAddr()},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			c, err := net.DialTimeout("tcp", tg.addr, 10*time.Second)
			if err != nil {
				b.Fatalf("failed to dial: %v", err)
			}
			defer c.Close()
			out := make([]byte, chunk)
			in := make([]byte, chunk)
			b.SetBytes(chunk)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(out); err != nil {
					b.Fatalf("write: %v", err)
				}
				if _, err := io.ReadFull(c, in); err != nil {
					b.Fatalf("read: %v", err)
				}
			}
		})
	}
}

// BenchmarkProxyTCPBulk measures bulk throughput (like iperf3): 1 MiB per
// op sent through web -> (mTLS) -> db to the echo app, and straight to it;
// the echo is drained concurrently. cpu-ns/B is the process's CPU time
// (client, app and, for two_proxies, both sidecars) per byte sent, which
// other load on the machine disturbs less than MB/s does.
func BenchmarkProxyTCPBulk(b *testing.B) {
	const chunk = 1 << 20
	m := newMesh(b, meshOptions{greetless: true})
	targets := []struct {
		name string
		addr string
	}{
		{"direct", m.dbs[0].app.Addr()},
		{"two_proxies", m.webAddr()},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			c, err := net.DialTimeout("tcp", tg.addr, 10*time.Second)
			if err != nil {
				b.Fatalf("failed to dial: %v", err)
			}
			defer c.Close()
			// The echo app sends everything back: drain it concurrently so
			// the measured direction never stalls on a full window.
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.Copy(io.Discard, c)
			}()
			out := make([]byte, chunk)
			b.SetBytes(chunk)
			before := cpuTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(out); err != nil {
					b.Fatalf("write: %v", err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N*chunk), "cpu-ns/B")
			c.Close()
			<-done
		})
	}
}

// httpMesh is web's upstream listener (HTTP connection manager, RDS) ->
// api's public listener (mTLS, ext_authz, HTTP connection manager) -> app.
type httpMesh struct {
	webPort  int
	web, api *Proxy
	app      *httptest.Server
	cp       *controlPlane
	webRes   map[string][]types.Resource // what cp serves web
}

func newHTTPMesh(t testing.TB, h http.Handler) *httpMesh {
	t.Helper()
	return newHTTPMeshRoutes(t, h, nil)
}

// newHTTPMeshRoutes is newHTTPMesh with web's route configuration changed by
// mod (if not nil) before it is served.
func newHTTPMeshRoutes(t testing.TB, h http.Handler, mod func(*routev3.RouteConfiguration)) *httpMesh {
	t.Helper()
	cp := newControlPlane(t)
	ca := newTestCA(t, "root-1")
	app := httptest.NewServer(h)
	t.Cleanup(app.Close)
	webPort, apiPort := freePort(t), freePort(t)
	apiCluster := sniFor("api")
	webRoutes := routeToCluster("api", apiCluster)
	if mod != nil {
		mod(webRoutes)
	}
	webRes := map[string][]types.Resource{
		typeListener: {upstreamListener("api", webPort, hcmFilter(t, "upstream.api", nil, "api"))},
		typeRoute:    {webRoutes},
		typeCluster:  {upstreamCluster(t, "api", "leaf", "roots")},
		typeEndpoint: {cla(apiCluster, fmt.Sprintf("127.0.0.1:%d", apiPort))},
		typeSecret:   {certSecret("leaf", ca.leaf(t, spiffeID("web"))), rootsSecret("roots", ca)},
	}
	cp.set("web-sidecar-proxy", webRes)
	cp.set("api-sidecar-proxy", map[string][]types.Resource{
		typeListener: {publicListener(t, apiPort, "leaf", "roots", hcmFilter(t, "public_listener", routeToCluster("local_app", "local_app"), ""))},
		typeCluster:  {localAppCluster(app.Listener.Addr().String())},
		typeSecret:   {certSecret("leaf", ca.leaf(t, spiffeID("api"))), rootsSecret("roots", ca)},
	})
	m := &httpMesh{webPort: webPort, app: app, cp: cp, webRes: webRes}
	m.web = startProxy(t, "web-sidecar-proxy", "web", cp.tcpAddr, true)
	m.api = startProxy(t, "api-sidecar-proxy", "api", cp.unixAddr(), false)
	testutil.WaitFor(t, waitTimeout, "web ready", m.web.Ready)
	testutil.WaitFor(t, waitTimeout, "api ready", m.api.Ready)
	// Ready means the initial config is applied; the public listener may
	// still be binding, so wait until it accepts.
	testutil.WaitFor(t, waitTimeout, "api public listener", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", apiPort), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return m
}

func (m *httpMesh) webURL() string { return fmt.Sprintf("http://127.0.0.1:%d/", m.webPort) }

// BenchmarkProxyHTTP measures small keep-alive GETs (10 concurrent, like
// the dataplane bench's fortio load) straight to the app and through
// web -> (mTLS) -> api. ns/op is wall time per request across all workers.
func BenchmarkProxyHTTP(b *testing.B) {
	m := newHTTPMesh(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"count":1}`)
	}))
	targets := []struct{ name, url string }{
		{"direct", m.app.URL + "/"},
		{"two_proxies", m.webURL()},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: waitTimeout}
			defer client.CloseIdleConnections()
			b.SetParallelism(5) // 10 workers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(tg.url)
					if err != nil {
						b.Errorf("GET: %v", err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("GET: status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkProxyHTTPRate holds a fixed 1,000 requests per second over 10
// keep-alive connections (the dataplane bench's latency load) for b.N
// requests and reports the process's CPU per request (client, app and, for
// two_proxies, both sidecars) and the latency percentiles. The difference
// between the two targets is what the sidecars cost at a moderate rate,
// where waking up per request matters more than throughput.
func BenchmarkProxyHTTPRate(b *testing.B) {
	m := newHTTPMesh(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"count":1}`)
	}))
	for _, tg := range []struct{ name, url string }{{"direct", m.app.URL + "/"}, {"two_proxies", m.webURL()}} {
		b.Run(tg.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: waitTimeout}
			defer client.CloseIdleConnections()
			runFixedRate(b, client, tg.url, 10, 1000)
		})
	}
}

// runFixedRate sends b.N GETs at rps requests per second from workers
// goroutines and reports cpu-µs/req, p50-µs and p99-µs.
func runFixedRate(b *testing.B, client *http.Client, url string, workers, rps int) {
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	interval := time.Duration(workers) * time.Second / time.Duration(rps)
	before := cpuTime(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for range tick.C {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				start := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					b.Errorf("GET: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime(b) - before
	slices.Sort(lat)
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
