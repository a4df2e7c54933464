package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/controlplane"
)

// The fan-out topology, shared by the server and the simulated proxies
// (the same as xds.BenchmarkFanout): fanoutServices upstream services with
// one sidecar each, and N proxies "app<i%10>-<i>-sidecar-proxy" with 3
// upstreams each.
const (
	fanoutServices  = 10
	fanoutUpstreams = 3
	fanoutDC        = "dc1"
	// fanoutHangGuard bounds every wait of the out-of-process fan-out.
	fanoutHangGuard = 90 * time.Second
)

// fanoutProxy returns simulated proxy i's ID, service and upstream service names.
func fanoutProxy(i int) (id, service string, upstreams []string) {
	service = fmt.Sprintf("app%d", i%fanoutServices)
	for u := 0; u < fanoutUpstreams; u++ {
		upstreams = append(upstreams, fmt.Sprintf("db%d", (i+u)%fanoutServices))
	}
	return fmt.Sprintf("%s-%d-sidecar-proxy", service, i), service, upstreams
}

// FanoutServerOptions configure StartFanoutServer.
type FanoutServerOptions struct {
	// Proxies is how many simulated proxies the catalog registers.
	Proxies int
	// DataDir holds the control plane's state (CA, intentions).
	DataDir string
	Logger  hclog.Logger
}

// FanoutServer is meshlet's real control plane (controlplane.New: catalog,
// CA, intentions, ext_authz, xDS server and the HTTP API) with the fan-out
// topology registered and compiled, serving gRPC on 127.0.0.1.
type FanoutServer struct {
	cp  *controlplane.ControlPlane
	reg *prometheus.Registry
	// Empty is sampled after the control plane started, before the
	// topology was registered.
	Empty HeapSample
}

// HeapSample is the Go runtime's view of a process's memory.
type HeapSample struct {
	HeapInuse  uint64
	HeapAlloc  uint64
	StackInuse uint64
	Goroutines int
	Connected  int // xDS streams that identified a node
}

// StartFanoutServer starts the control plane, registers the topology and
// waits until every proxy's resources are compiled.
func StartFanoutServer(o FanoutServerOptions) (*FanoutServer, error) {
	if o.Proxies < 1 {
		return nil, fmt.Errorf("failed to start fan-out server: proxies must be at least 1, got %d", o.Proxies)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	reg := prometheus.NewRegistry()
	cat := catalog.New()
	cp, err := controlplane.New(controlplane.Config{
		DataDir: o.DataDir, Datacenter: fanoutDC, NodeName: "bench", DefaultAllow: true,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: o.Logger, Registerer: reg,
	}, cat)
	if err != nil {
		return nil, fmt.Errorf("failed to build control plane: %w", err)
	}
	if err := cp.Start(); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("failed to start control plane: %w", err)
	}
	s := &FanoutServer{cp: cp, reg: reg}
	s.Empty = s.Sample()
	registerFanout(cat, o.Proxies)
	// Every app proxy has a public listener and one per upstream; every
	// upstream sidecar has its public listener.
	want := float64(o.Proxies*(1+fanoutUpstreams) + fanoutServices)
	if err := s.waitGauge("meshlet_xds_resources", "Listener", want); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("failed to compile %d proxies: %w", o.Proxies, err)
	}
	return s, nil
}

// registerFanout registers the upstream sidecars and n app proxies.
func registerFanout(cat *catalog.Catalog, n int) {
	reg := func(id, service, addr string, ups []catalog.Upstream) {
		cat.Register(catalog.ServiceInstance{
			ID: id, Name: service + "-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: addr, Port: 21000, Healthy: true,
			Proxy: &catalog.Proxy{DestinationServiceName: service, DestinationServiceID: id + "-app", LocalServicePort: 8080, Upstreams: ups},
		})
	}
	for s := 0; s < fanoutServices; s++ {
		reg(fmt.Sprintf("db%d-0-sidecar-proxy", s), fmt.Sprintf("db%d", s), "10.2.0.1", nil)
	}
	for i := 0; i < n; i++ {
		id, service, upstreams := fanoutProxy(i)
		var ups []catalog.Upstream
		for u, dest := range upstreams {
			ups = append(ups, catalog.Upstream{DestinationName: dest, LocalBindPort: 9001 + u})
		}
		reg(id, service, fmt.Sprintf("10.3.%d.%d", i/250, i%250+1), ups)
	}
}

// Addr is the xDS gRPC address.
func (s *FanoutServer) Addr() string { return s.cp.GRPCAddr() }

// TrustDomain is the CA's trust domain (upstream cluster names carry it).
func (s *FanoutServer) TrustDomain() string { return s.cp.CA.TrustDomain() }

// WaitConnected waits until at least n xDS streams have identified a node.
func (s *FanoutServer) WaitConnected(n int) error {
	return s.waitGauge("meshlet_xds_connected_proxies", "", float64(n))
}

// Sample collects garbage, returns freed memory to the OS (so that RSS
// read right after is the retained memory, not the connect burst's peak)
// and reads the runtime's memory statistics.
func (s *FanoutServer) Sample() HeapSample {
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	connected, _ := s.gauge("meshlet_xds_connected_proxies", "")
	return HeapSample{HeapInuse: m.HeapInuse, HeapAlloc: m.HeapAlloc, StackInuse: m.StackInuse,
		Goroutines: runtime.NumGoroutine(), Connected: int(connected)}
}

// Close stops the control plane.
func (s *FanoutServer) Close() { s.cp.Stop() }

// waitGauge polls a gauge (with type label typ, or unlabelled) until it
// reaches want, for at most fanoutHangGuard.
func (s *FanoutServer) waitGauge(name, typ string, want float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), fanoutHangGuard)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := s.gauge(name, typ)
		if err != nil {
			return err
		}
		if v >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to wait for %s %s: %v of %v after %s", name, typ, v, want, fanoutHangGuard)
		case <-tick.C:
		}
	}
}

// gauge reads one gauge from the control plane's registry (0 when absent).
func (s *FanoutServer) gauge(name, typ string) (float64, error) {
	mfs, err := s.reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("failed to gather metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if typ == "" || labelIs(m, "type", typ) {
				return m.GetGauge().GetValue(), nil
			}
		}
	}
	return 0, nil
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// fanoutDataDir makes a throwaway data dir for one server process.
func fanoutDataDir() (string, func(), error) {
	dir, err := os.MkdirTemp("", "meshlet-xdsload-")
	if err != nil {
		return "", nil, fmt.Errorf("failed to create data dir: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}
