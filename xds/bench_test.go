package xds

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
)

const (
	benchServices  = 10
	proxiesPerConn = 100
	benchHangGuard = 90 * time.Second
)

// BenchmarkFanout measures, with N simulated proxies speaking real ADS over
// gRPC on 127.0.0.1 (each its own node, 3 upstreams): the time to connect
// and receive a full config, the time from one endpoint change to every
// affected proxy ACKing it (p50/p99), and heap per proxy (server and
// simulated clients together, same process; the agent's own heap and RSS
// per connected proxy are measured with the two in separate processes by
// bench/cmd/xdsload). MESHLET_BENCH_LARGE=1 adds N=10000.
func BenchmarkFanout(b *testing.B) {
	sizes := []int{100, 1000}
	if os.Getenv("MESHLET_BENCH_LARGE") == "1" {
		sizes = append(sizes, 10000)
	}
	for _, mode := range []string{"sotw", "delta"} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/proxies=%d", mode, n), func(b *testing.B) { benchFanout(b, n, mode == "delta") })
		}
	}
}

// benchProxy is one simulated Envoy.
type benchProxy struct {
	id       string
	clusters []string
	watches  bool // has the changing service upstream
	ready    chan struct{}
}

type fanout struct {
	target   string       // the CLA that changes
	want     atomic.Int64 // endpoints the next update must carry
	iter     atomic.Int64
	start    atomic.Int64 // unix nanos of the change
	results  chan time.Duration
	affected int
}

func benchFanout(b *testing.B, n int, delta bool) {
	e := newEnv(b, hclog.Error)
	f, proxies := setupFanout(b, e, n)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	start := time.Now()
	connectAll(b, e, f, proxies, delta, ctx, &wg)
	connect := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)

	var lat []time.Duration
	endpoints := 1
	for b.Loop() {
		endpoints++
		f.want.Store(int64(endpoints))
		f.iter.Add(1)
		f.start.Store(time.Now().UnixNano())
		e.proxy(fmt.Sprintf("db0-%d-sidecar-proxy", endpoints), "db0", "10.2.1.1", 20000+endpoints)
		for k := 0; k < f.affected; k++ {
			select {
			case d := <-f.results:
				lat = append(lat, d)
			case <-time.After(benchHangGuard):
				b.Fatalf("only %d of %d proxies ACKed the change", k, f.affected)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(connect.Milliseconds()), "connect_ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heap_B/proxy")
	b.ReportMetric(float64(f.affected), "affected")
}

// setupFanout registers benchServices upstream services with one sidecar
// each and n proxies with 3 upstreams each, and waits until all compile.
func setupFanout(b *testing.B, e *testEnv, n int) (*fanout, []*benchProxy) {
	f := &fanout{target: ClusterName("db0", "dc1", e.ca.td), results: make(chan time.Duration, n)}
	for s := 0; s < benchServices; s++ {
		e.proxy(fmt.Sprintf("db%d-0-sidecar-proxy", s), fmt.Sprintf("db%d", s), "10.2.0.1", 21000)
	}
	proxies := make([]*benchProxy, n)
	for i := range proxies {
		p := &benchProxy{id: fmt.Sprintf("app%d-%d-sidecar-proxy", i%benchServices, i), ready: make(chan struct{})}
		var ups []catalog.Upstream
		for u := 0; u < 3; u++ {
			svc := (i + u) % benchServices
			ups = append(ups, catalog.Upstream{DestinationName: fmt.Sprintf("db%d", svc), LocalBindPort: 9001 + u})
			p.clusters = append(p.clusters, ClusterName(fmt.Sprintf("db%d", svc), "dc1", e.ca.td))
			p.watches = p.watches || svc == 0
		}
		if p.watches {
			f.affected++
		}
		e.proxy(p.id, fmt.Sprintf("app%d", i%benchServices), fmt.Sprintf("10.3.%d.%d", i/250, i%250+1), 21000, ups...)
		proxies[i] = p
	}
	deadline := time.Now().Add(benchHangGuard)
	for e.srv.cache.count(listenerType) < 4*n {
		if time.Now().After(deadline) {
			b.Fatalf("proxies not compiled after %s", benchHangGuard)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.want.Store(1)
	return f, proxies
}

// connectAll starts every simulated proxy (proxiesPerConn per gRPC
// connection) and waits until each has its full config.
func connectAll(b *testing.B, e *testEnv, f *fanout, proxies []*benchProxy, delta bool, ctx context.Context, wg *sync.WaitGroup) {
	deadline := time.Now().Add(benchHangGuard)
	for i := 0; i < len(proxies); i += proxiesPerConn {
		conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
		for _, p := range proxies[i:min(i+proxiesPerConn, len(proxies))] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if delta {
					p.runDelta(ctx, cl, f)
				} else {
					p.runSotw(ctx, cl, f)
				}
			}()
		}
	}
	for i, p := range proxies {
		select {
		case <-p.ready:
		case <-time.After(time.Until(deadline)):
			b.Fatalf("proxy %d not configured after %s", i, benchHangGuard)
		}
	}
}

// subscriptions is what the simulated proxy asks for per type: wildcard
// CDS/LDS, its upstreams' CLAs and its two secrets.
func (p *benchProxy) subscriptions() map[string][]string {
	return map[string][]string{clusterType: nil, endpointType: p.clusters, listenerType: nil, secretType: {"leaf:" + p.id[:4], RootsSecret}}
}

// seen handles an EDS payload; it reports when the target CLA carries the
// expected endpoint count for the current iteration (once per iteration).
func (p *benchProxy) seen(f *fanout, cla *endpoint.ClusterLoadAssignment, reported *int64) {
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	if it := f.iter.Load(); int64(n) == f.want.Load() && it > *reported && it > 0 {
		*reported = it
		f.results <- time.Since(time.Unix(0, f.start.Load()))
	}
}

func (p *benchProxy) runSotw(ctx context.Context, cl discovery.AggregatedDiscoveryServiceClient, f *fanout) {
	st, err := cl.StreamAggregatedResources(ctx)
	if err != nil {
		return
	}
	node := &core.Node{Id: p.id}
	names := p.subscriptions()
	for _, t := range []string{clusterType, endpointType, listenerType, secretType} {
		if st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: t, ResourceNames: names[t]}) != nil {
			return
		}
	}
	got := map[string]bool{}
	var reported int64
	for {
		r, err := st.Recv()
		if err != nil {
			return
		}
		if st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: names[r.GetTypeUrl()], VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}) != nil {
			return
		}
		if r.GetTypeUrl() == endpointType && p.watches {
			// SotW carries no resource names: decode each CLA once to find the target.
			for _, a := range r.GetResources() {
				cla := &endpoint.ClusterLoadAssignment{}
				if proto.Unmarshal(a.GetValue(), cla) == nil && cla.GetClusterName() == f.target {
					p.seen(f, cla, &reported)
				}
			}
		}
		p.markReady(got, r.GetTypeUrl())
	}
}

func (p *benchProxy) runDelta(ctx context.Context, cl discovery.AggregatedDiscoveryServiceClient, f *fanout) {
	st, err := cl.DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	node := &core.Node{Id: p.id}
	subs := p.subscriptions()
	for _, t := range []string{clusterType, endpointType, listenerType, secretType} {
		if st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: t, ResourceNamesSubscribe: subs[t]}) != nil {
			return
		}
	}
	got := map[string]bool{}
	var reported int64
	for {
		r, err := st.Recv()
		if err != nil {
			return
		}
		if st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}) != nil {
			return
		}
		if r.GetTypeUrl() == endpointType && p.watches {
			for _, res := range r.GetResources() {
				cla := &endpoint.ClusterLoadAssignment{}
				if res.GetName() == f.target && proto.Unmarshal(res.GetResource().GetValue(), cla) == nil {
					p.seen(f, cla, &reported)
				}
			}
		}
		p.markReady(got, r.GetTypeUrl())
	}
}

func (p *benchProxy) markReady(got map[string]bool, typeURL string) {
	if len(got) == 4 {
		return
	}
	got[typeURL] = true
	if len(got) == 4 {
		close(p.ready)
	}
}

// BenchmarkCachePublish isolates the cache: one shared CLA changes under N
// parked delta watches (no gRPC). It shows the marshal-once fan-out cost
// per change, re-arming every watch as a client's ACK would.
func BenchmarkCachePublish(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("watches=%d", n), func(b *testing.B) {
			c := newCache(hclog.NewNullLogger())
			name := "db.default.dc1.internal.td"
			type client struct {
				sub stream.Subscription
				ch  chan cache.DeltaResponse
			}
			clients := make([]*client, n)
			arm := func(cl *client, i int) {
				req := &discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: fmt.Sprint("node-", i)}, TypeUrl: endpointType, ResponseNonce: "1"}
				if _, err := c.CreateDeltaWatch(req, cl.sub, cl.ch); err != nil {
					b.Fatal(err)
				}
			}
			for i := range clients {
				clients[i] = &client{sub: stream.NewDeltaSubscription([]string{name}, nil, nil, false), ch: make(chan cache.DeltaResponse, 1)}
				arm(clients[i], i)
			}
			var insts []catalog.ServiceInstance
			for b.Loop() {
				insts = append(insts, catalog.ServiceInstance{Address: "10.0.0.1", Port: 20000 + len(insts), Healthy: true})
				if err := c.publish(endpointType, []op{{name: name, msg: loadAssignment(name, "dc1", insts)}}); err != nil {
					b.Fatal(err)
				}
				for i, cl := range clients {
					r := <-cl.ch
					cl.sub.SetReturnedResources(r.GetNextVersionMap())
					arm(cl, i)
				}
			}
		})
	}
}
