package xds

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

func TestNewServerConfigErrors(t *testing.T) {
	c := newTestCA(t)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no catalog", Config{Certs: c}},
		{"no certs", Config{Catalog: catalog.New()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewServer(tc.cfg); !errors.Is(err, ErrInvalidServerConfig) {
				t.Fatalf("err = %v, want ErrInvalidServerConfig", err)
			}
		})
	}
	reg := prometheus.NewRegistry()
	s, err := NewServer(Config{Catalog: catalog.New(), Certs: c, Registerer: reg, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := NewServer(Config{Catalog: catalog.New(), Certs: c, Registerer: reg, Logger: hclog.NewNullLogger()}); err == nil {
		t.Fatal("second server on one registry: no error")
	}
}

func TestListenAlloc(t *testing.T) {
	e := newEnv(t, hclog.Error)
	dir := filepath.Join(t.TempDir(), "alloc", "tmp")
	path := filepath.Join(dir, "consul_grpc.sock")

	// A stale socket left by a previous agent is replaced.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	_ = stale.Close()

	if _, err := e.srv.ListenAlloc("", path); !errors.Is(err, ErrNoAllocID) {
		t.Fatalf("ListenAlloc without an allocation: err = %v, want ErrNoAllocID", err)
	}
	l, err := e.srv.ListenAlloc("a1", path)
	if err != nil {
		t.Fatalf("ListenAlloc: %v", err)
	}
	inst := testProxy("x", "web", 21000, nil)
	inst.AllocID = "a1"
	e.cat.Register(inst)
	go func() { _ = e.srv.Serve(l) }()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode = %v, want 0666 socket", fi.Mode())
	}

	// A task's sidecar reaches ADS over it.
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "x"}, TypeUrl: listenerType}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("no LDS answer over the unix socket: %v", err)
	}

	// Never clobber a file that is not a socket.
	plain := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.ListenAlloc("a1", plain); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("err = %v, want ErrNotSocket", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Error("regular file was modified")
	}
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func metricSum(mf *dto.MetricFamily) float64 {
	var n float64
	for _, m := range mf.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			n += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			n += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			n += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

func TestMetricsAndStreamLifecycle(t *testing.T) {
	e, dbCluster := meshEnv(t)
	c := e.dial(webProxy, false)
	c.req(endpointType, []string{dbCluster}, "", "", "")
	c.ack(c.next(endpointType))
	testutil.WaitFor(t, hangGuard, "connected", func() bool { return e.srv.ProxyStatus(webProxy).Connected })

	e.proxy("db-2-sidecar-proxy", "db", "10.1.0.3", 21001)
	push := c.next(endpointType)
	c.ack(push)
	e.proxy("db-3-sidecar-proxy", "db", "10.1.0.4", 21001)
	c.nack(c.next(endpointType), push.GetVersionInfo())

	testutil.WaitFor(t, hangGuard, "metrics", func() bool {
		m := gather(t, e.reg)
		return metricSum(m["meshlet_xds_nacks_total"]) == 1 && metricSum(m["meshlet_xds_push_latency_seconds"]) >= 1
	})
	m := gather(t, e.reg)
	if got := metricSum(m["meshlet_xds_connected_proxies"]); got != 1 {
		t.Errorf("connected = %v, want 1", got)
	}
	if got := metricSum(m["meshlet_xds_pushes_total"]); got < 3 {
		t.Errorf("pushes = %v, want >= 3", got)
	}
	if got := metricSum(m["meshlet_xds_resources"]); got == 0 {
		t.Error("resources gauge is zero")
	}

	// A node that is not a registered proxy: answered (empty), and its
	// state is dropped when its stream closes.
	ghost := e.dial("ghost", false)
	ghost.req(listenerType, nil, "", "", "")
	gl := ghost.next(listenerType)
	if got := decode(t, gl); len(got) != 0 {
		t.Fatalf("ghost got listeners %v", keys(got))
	}
	ghost.nack(gl, "")
	testutil.WaitFor(t, hangGuard, "ghost rejection", func() bool { return e.srv.ProxyError("ghost") != nil })
	ghost.close()
	c.close()
	testutil.WaitFor(t, hangGuard, "streams closed", func() bool {
		return metricSum(gather(t, e.reg)["meshlet_xds_connected_proxies"]) == 0
	})
	if st := e.srv.ProxyStatus(webProxy); st.Connected || len(st.Rejected) != 1 {
		t.Errorf("registered proxy status after close = %+v, want disconnected, rejection kept", st)
	}
	testutil.WaitFor(t, hangGuard, "ghost forgotten", func() bool {
		e.srv.statusMu.Lock()
		defer e.srv.statusMu.Unlock()
		_, ok := e.srv.status["ghost"]
		return !ok
	})
}

func TestClusterName(t *testing.T) {
	if got := ClusterName("db", "dc1", "abc.meshlet"); got != "db.default.dc1.internal.abc.meshlet" {
		t.Fatal(got)
	}
	if !strings.HasPrefix(PublicListenerName(21000), "public_listener:0.0.0.0:") {
		t.Fatal(PublicListenerName(21000))
	}
}

// Stop ends open ADS streams instead of waiting on them.
func TestStopEndsStreams(t *testing.T) {
	e, _ := meshEnv(t)
	c := e.dial(webProxy, true)
	c.dreq(listenerType, nil, nil, "", "")
	c.ack(c.dnext(listenerType))
	e.srv.Stop()
	for range c.in { // drained until the stream ends
	}
	e.srv.Stop() // idempotent
}

// A catalog filled before the server starts is compiled at once.
func TestInitialSync(t *testing.T) {
	cat := catalog.New()
	cat.Register(testProxy("p1", "web", 21000, nil, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191}))
	cat.Register(catalog.ServiceInstance{ID: "g1", Name: "greeter", Address: "127.0.0.1", Port: 5000, Healthy: true})
	s, err := NewServer(Config{Catalog: cat, Certs: newTestCA(t), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	testutil.WaitFor(t, hangGuard, "initial resources", func() bool {
		return s.cache.has(listenerType, "p1", "db:127.0.0.1:9191") && s.cache.has(listenerType, "", "greeter") &&
			s.cache.has(secretType, "", "leaf:web") && s.cache.has(secretType, "", RootsSecret) &&
			s.cache.has(endpointType, "", ClusterName("db", "dc1", testTD))
	})
}
