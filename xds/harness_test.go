package xds

import (
	"context"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
	"github.com/meshlet/meshlet/internal/testutil"
)

const hangGuard = 10 * time.Second

// testLog sends server logs to t.Log until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

type testEnv struct {
	t    testing.TB
	srv  *Server
	cat  *catalog.Catalog
	ca   *testCA
	reg  *prometheus.Registry
	addr string
	conn *grpc.ClientConn
}

func newEnv(t testing.TB, level hclog.Level) *testEnv {
	t.Helper()
	return newEnvCoalesce(t, level, 2*time.Millisecond)
}

// newEnvCoalesce is newEnv with the reconciler batching changes for d.
func newEnvCoalesce(t testing.TB, level hclog.Level, d time.Duration) *testEnv {
	t.Helper()
	return newEnvConfig(t, level, d, nil)
}

// newEnvConfig is newEnvCoalesce with a last say on the server's Config.
func newEnvConfig(t testing.TB, level hclog.Level, d time.Duration, edit func(*Config)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, cat: catalog.New(), ca: newTestCA(t), reg: prometheus.NewRegistry()}
	w := &testLog{t: t}
	cfg := Config{
		Catalog: e.cat, Certs: e.ca, Datacenter: "dc1", Coalesce: d, Registerer: e.reg,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "test", Level: level, Output: w}),
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	e.srv = s
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.conn = conn
	t.Cleanup(func() {
		_ = conn.Close()
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return e
}

func (e *testEnv) plain(id, name, addr string, port int) {
	e.cat.Register(catalog.ServiceInstance{ID: id, Name: name, Address: addr, Port: port, Healthy: true, Connect: true})
}

func (e *testEnv) proxy(id, dest, addr string, port int, ups ...catalog.Upstream) {
	inst := testProxy(id, dest, port, nil, ups...)
	inst.Address = addr
	e.cat.Register(inst)
}

// waitProxy waits until a proxy's public listener is published.
func (e *testEnv) waitProxy(id string, port int) {
	e.t.Helper()
	testutil.WaitFor(e.t, hangGuard, "proxy "+id+" published", func() bool {
		return e.srv.cache.get(listenerType, id, PublicListenerName(port)) != nil
	})
}

// adsClient speaks raw ADS (SotW or delta) as a test proxy would.
type adsClient struct {
	t       testing.TB
	node    string
	isDelta bool
	sotw    discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	delta   discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	in      chan proto.Message
	backlog map[string][]proto.Message
	names   map[string][]string
	cancel  context.CancelFunc
	err     error // why the stream ended; read only after in is closed
}

func (e *testEnv) dial(node string, isDelta bool) *adsClient {
	e.t.Helper()
	return e.dialConn(e.conn, node, isDelta)
}

// dialConn opens an ADS stream on a given client connection.
func (e *testEnv) dialConn(conn *grpc.ClientConn, node string, isDelta bool) *adsClient {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &adsClient{t: e.t, node: node, isDelta: isDelta, in: make(chan proto.Message, 64),
		backlog: map[string][]proto.Message{}, names: map[string][]string{}, cancel: cancel}
	cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
	var err error
	var recv func() (proto.Message, error)
	if isDelta {
		c.delta, err = cl.DeltaAggregatedResources(ctx)
		recv = func() (proto.Message, error) { return c.delta.Recv() }
	} else {
		c.sotw, err = cl.StreamAggregatedResources(ctx)
		recv = func() (proto.Message, error) { return c.sotw.Recv() }
	}
	if err != nil {
		e.t.Fatalf("open ADS stream: %v", err)
	}
	go func() {
		defer close(c.in)
		for {
			m, err := recv()
			if err != nil {
				c.err = err // published by close(c.in)
				return
			}
			c.in <- m
		}
	}()
	e.t.Cleanup(c.close)
	return c
}

func (c *adsClient) close() { c.cancel() }

func nackStatus(msg string) *status.Status {
	if msg == "" {
		return nil
	}
	return &status.Status{Code: 3, Message: msg}
}

// req sends a SotW request (names: full subscription).
func (c *adsClient) req(typeURL string, names []string, version, nonce, nack string) {
	c.t.Helper()
	c.names[typeURL] = names
	err := c.sotw.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: c.node}, TypeUrl: typeURL, ResourceNames: names,
		VersionInfo: version, ResponseNonce: nonce, ErrorDetail: nackStatus(nack)})
	if err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// dreq sends a delta request.
func (c *adsClient) dreq(typeURL string, sub, unsub []string, nonce, nack string) {
	c.t.Helper()
	err := c.delta.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: c.node}, TypeUrl: typeURL,
		ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub, ResponseNonce: nonce, ErrorDetail: nackStatus(nack)})
	if err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func typeOf(m proto.Message) string {
	if r, ok := m.(*discovery.DiscoveryResponse); ok {
		return r.GetTypeUrl()
	}
	return m.(*discovery.DeltaDiscoveryResponse).GetTypeUrl()
}

func (c *adsClient) pull(typeURL string, wait time.Duration) proto.Message {
	if q := c.backlog[typeURL]; len(q) > 0 {
		c.backlog[typeURL] = q[1:]
		return q[0]
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				return nil
			}
			if typeOf(m) == typeURL {
				return m
			}
			c.backlog[typeOf(m)] = append(c.backlog[typeOf(m)], m)
		case <-timer.C:
			return nil
		}
	}
}

// next waits for the next SotW response of a type.
func (c *adsClient) next(typeURL string) *discovery.DiscoveryResponse {
	c.t.Helper()
	m := c.pull(typeURL, hangGuard)
	if m == nil {
		c.t.Fatalf("node %s: no %s response", c.node, typeLabel(typeURL))
	}
	return m.(*discovery.DiscoveryResponse)
}

// dnext waits for the next delta response of a type.
func (c *adsClient) dnext(typeURL string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	m := c.pull(typeURL, hangGuard)
	if m == nil {
		c.t.Fatalf("node %s: no %s delta response", c.node, typeLabel(typeURL))
	}
	return m.(*discovery.DeltaDiscoveryResponse)
}

// count drains responses of a type for d and returns how many came.
func (c *adsClient) count(typeURL string, d time.Duration) int {
	n := 0
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 || c.pull(typeURL, left) == nil {
			return n
		}
		n++
	}
}

// ack acknowledges a response.
func (c *adsClient) ack(m proto.Message) {
	c.t.Helper()
	switch r := m.(type) {
	case *discovery.DiscoveryResponse:
		c.req(r.GetTypeUrl(), c.names[r.GetTypeUrl()], r.GetVersionInfo(), r.GetNonce(), "")
	case *discovery.DeltaDiscoveryResponse:
		c.dreq(r.GetTypeUrl(), nil, nil, r.GetNonce(), "")
	}
}

// nack rejects a response; SotW keeps the previously accepted version.
func (c *adsClient) nack(m proto.Message, accepted string) {
	c.t.Helper()
	switch r := m.(type) {
	case *discovery.DiscoveryResponse:
		c.req(r.GetTypeUrl(), c.names[r.GetTypeUrl()], accepted, r.GetNonce(), "test rejection")
	case *discovery.DeltaDiscoveryResponse:
		c.dreq(r.GetTypeUrl(), nil, nil, r.GetNonce(), "test rejection")
	}
}

// decode unpacks and validates (recursively) every resource of a response.
func decode(t testing.TB, m proto.Message) map[string]proto.Message {
	t.Helper()
	out := map[string]proto.Message{}
	add := func(a interface {
		UnmarshalNew() (proto.Message, error)
	}) {
		r, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("unpack: %v", err)
		}
		if err := envoyvalidate.All(r); err != nil {
			t.Errorf("served resource fails validation: %v", err)
		}
		out[cache.GetResourceName(r)] = r
	}
	switch r := m.(type) {
	case *discovery.DiscoveryResponse:
		for _, a := range r.GetResources() {
			add(a)
		}
	case *discovery.DeltaDiscoveryResponse:
		for _, res := range r.GetResources() {
			add(res.GetResource())
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
