package xds

import (
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

const (
	allocA  = "alloc-a"
	allocB  = "alloc-b"
	apiNode = "api-1-sidecar-proxy"  // alloc A, destination "api"
	dashPx  = "dash-1-sidecar-proxy" // alloc B, destination "dash"
)

// allocEnv: two allocations, each with its own socket and sidecar proxy,
// plus the host TCP listener of newEnv.
type allocEnv struct {
	*testEnv
	sockA, sockB *grpc.ClientConn
	pathA        string // allocation A's socket
	lA           interface{ Close() error }
}

func newAllocEnv(t *testing.T) *allocEnv { return newAllocEnvConfig(t, nil) }

// newAllocEnvConfig is newAllocEnv with a last say on the server's Config.
func newAllocEnvConfig(t *testing.T, edit func(*Config)) *allocEnv {
	e := &allocEnv{testEnv: newEnvConfig(t, hclog.Error, 2*time.Millisecond, edit)}
	dir := t.TempDir()
	conns := map[string]*grpc.ClientConn{}
	for _, id := range []string{allocA, allocB} {
		path := filepath.Join(dir, id, "alloc", "tmp", "meshlet_grpc.sock")
		l, err := e.srv.ListenAlloc(id, path)
		if err != nil {
			t.Fatalf("ListenAlloc: %v", err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if id == allocA {
			e.lA, e.pathA = l, path
		}
		go func() { _ = e.srv.Serve(l) }()
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		conns[id] = conn
	}
	e.sockA, e.sockB = conns[allocA], conns[allocB]
	for _, p := range []struct{ id, dest, alloc string }{{apiNode, "api", allocA}, {dashPx, "dash", allocB}} {
		inst := testProxy(p.id, p.dest, 21000, nil)
		inst.AllocID = p.alloc
		e.cat.Register(inst)
		e.cat.Register(catalog.ServiceInstance{ID: p.id + "-app", Name: p.dest, AllocID: p.alloc, Address: "10.0.0.1", Port: 8080, Healthy: true, Connect: true})
	}
	for _, id := range []string{apiNode, dashPx} {
		e.waitProxy(id, 21000)
	}
	testutil.WaitFor(t, hangGuard, "leaves published", func() bool {
		return e.srv.cache.get(secretType, "", LeafSecretName("api")) != nil && e.srv.cache.get(secretType, "", LeafSecretName("dash")) != nil
	})
	return e
}

// ended waits for the stream to end and returns its gRPC status code.
func (c *adsClient) ended() (codes.Code, string) {
	c.t.Helper()
	timer := time.NewTimer(hangGuard)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				s := status.Convert(c.err)
				return s.Code(), s.Message()
			}
			if typeOf(m) == secretType {
				if leaked := decode(c.t, m)[LeafSecretName("dash")]; leaked != nil {
					c.t.Errorf("node %s: received another allocation's leaf", c.node)
				}
			}
		case <-timer.C:
			c.t.Fatalf("node %s: stream still open, want it denied", c.node)
			return codes.OK, ""
		}
	}
}

func (c *adsClient) wantDenied() {
	c.t.Helper()
	if code, msg := c.ended(); code != codes.PermissionDenied {
		c.t.Fatalf("node %s: stream ended with %v (%s), want PermissionDenied", c.node, code, msg)
	}
}

// secretsOf sends one secrets request and returns the names it received.
func (c *adsClient) secretsOf(names ...string) map[string]any {
	c.t.Helper()
	if c.isDelta {
		c.dreq(secretType, names, nil, "", "")
		return asAny(decode(c.t, c.dnext(secretType)))
	}
	c.req(secretType, names, "", "", "")
	return asAny(decode(c.t, c.next(secretType)))
}

func TestAllocSocketServesOwnProxy(t *testing.T) {
	e := newAllocEnv(t)
	for _, delta := range []bool{false, true} {
		c := e.dialConn(e.sockA, apiNode, delta)
		wantNames(t, "secrets", c.secretsOf(LeafSecretName("api"), RootsSecret), LeafSecretName("api"), RootsSecret)
		var got map[string]any
		if delta {
			c.dreq(listenerType, nil, nil, "", "")
			got = asAny(decode(t, c.dnext(listenerType)))
		} else {
			c.req(listenerType, nil, "", "", "")
			got = asAny(decode(t, c.next(listenerType)))
		}
		wantNames(t, "listeners", got, PublicListenerName(21000))
		c.close()
	}
}

func TestAllocSocketDenies(t *testing.T) {
	e := newAllocEnv(t)
	otherLeaf := LeafSecretName("dash")
	cases := []struct {
		name  string
		delta bool
		node  string
		setup func(c *adsClient) // a legitimate first request, if any
		run   func(c *adsClient)
	}{
		{"sotw other allocation's proxy", false, dashPx, nil, func(c *adsClient) { c.req(listenerType, nil, "", "", "") }},
		{"delta other allocation's proxy", true, dashPx, nil, func(c *adsClient) { c.dreq(clusterType, nil, nil, "", "") }},
		{"sotw unregistered node", false, "proxyless-client", nil, func(c *adsClient) { c.req(listenerType, []string{"api"}, "", "", "") }},
		{"sotw app instance as node", false, apiNode + "-app", nil, func(c *adsClient) { c.req(listenerType, nil, "", "", "") }},
		{"delta no node", true, "", nil, func(c *adsClient) { c.dreq(secretType, []string{RootsSecret}, nil, "", "") }},
		{"sotw other leaf by name", false, apiNode, nil, func(c *adsClient) { c.req(secretType, []string{otherLeaf}, "", "", "") }},
		{"sotw other leaf among own", false, apiNode, nil, func(c *adsClient) {
			c.req(secretType, []string{LeafSecretName("api"), RootsSecret, otherLeaf}, "", "", "")
		}},
		{"delta other leaf by name", true, apiNode, nil, func(c *adsClient) { c.dreq(secretType, []string{otherLeaf}, nil, "", "") }},
		{"delta other leaf with wildcard", true, apiNode, nil, func(c *adsClient) { c.dreq(secretType, []string{"*", otherLeaf}, nil, "", "") }},
		{"sotw other leaf after own", false, apiNode, ownLeaf, func(c *adsClient) {
			r := c.next(secretType) // answer to the setup request below
			c.req(secretType, []string{LeafSecretName("api"), otherLeaf}, r.GetVersionInfo(), r.GetNonce(), "")
		}},
		{"delta other leaf added later", true, apiNode, ownLeaf, func(c *adsClient) {
			c.ack(c.dnext(secretType))
			c.dreq(secretType, []string{otherLeaf}, nil, "", "")
		}},
		{"delta other leaf in initial versions", true, apiNode, nil, func(c *adsClient) {
			if err := c.delta.Send(&discovery.DeltaDiscoveryRequest{Node: nodeOf(apiNode), TypeUrl: secretType,
				ResourceNamesSubscribe: []string{RootsSecret}, InitialResourceVersions: map[string]string{otherLeaf: "1"}}); err != nil {
				t.Fatalf("send: %v", err)
			}
		}},
		{"sotw switch to another node", false, apiNode, ownLeaf, func(c *adsClient) {
			c.next(secretType)
			c.node = dashPx
			c.req(listenerType, nil, "", "", "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dialConn(e.sockA, tc.node, tc.delta)
			c.t = t
			if tc.setup != nil {
				tc.setup(c)
			}
			tc.run(c)
			c.wantDenied()
		})
	}
	// The denied streams changed nothing: A's proxy still gets its own leaf.
	c := e.dialConn(e.sockA, apiNode, true)
	wantNames(t, "secrets after denials", c.secretsOf(LeafSecretName("api")), LeafSecretName("api"))
}

// ownLeaf subscribes to the proxy's own leaf, as a legitimate proxy does.
func ownLeaf(c *adsClient) {
	if c.isDelta {
		c.dreq(secretType, []string{LeafSecretName("api")}, nil, "", "")
		return
	}
	c.req(secretType, []string{LeafSecretName("api")}, "", "", "")
}

func nodeOf(id string) *core.Node { return &core.Node{Id: id} }

// A wildcard secrets subscription on an allocation's socket yields nothing:
// leaves are shared resources and only ever sent by name.
func TestAllocSocketWildcardSecrets(t *testing.T) {
	e := newAllocEnv(t)
	for _, delta := range []bool{false, true} {
		c := e.dialConn(e.sockA, apiNode, delta)
		if got := c.secretsOf(); len(got) != 0 {
			t.Errorf("delta=%v: wildcard secrets = %v, want none", delta, keys(got))
		}
		c.close()
	}
}

// The host listener is trusted as the host: any node, any leaf (hostGrant).
func TestHostListenerServesEverything(t *testing.T) {
	e := newAllocEnv(t)
	for _, delta := range []bool{false, true} {
		c := e.dial(apiNode, delta)
		wantNames(t, "secrets", c.secretsOf(LeafSecretName("api"), LeafSecretName("dash")), LeafSecretName("api"), LeafSecretName("dash"))
		c.close()
	}
	// B's own proxy works on B's socket.
	c := e.dialConn(e.sockB, dashPx, false)
	wantNames(t, "B's secrets", c.secretsOf(LeafSecretName("dash")), LeafSecretName("dash"))
}

// Closing an allocation's listener ends the streams made through it.
func TestAllocListenerCloseEndsStreams(t *testing.T) {
	e := newAllocEnv(t)
	c := e.dialConn(e.sockA, apiNode, false)
	c.secretsOf(LeafSecretName("api"))
	if err := e.lA.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if code, msg := c.ended(); code != codes.Unavailable {
		t.Fatalf("stream ended with %v (%s), want Unavailable", code, msg)
	}
}
