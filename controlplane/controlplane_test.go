package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	consulapi "github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/xds"
)

// startComposed starts the real control plane on loopback over a fresh
// catalog, in a temporary data dir.
func startComposed(t *testing.T) (*ControlPlane, *catalog.Catalog, string) {
	t.Helper()
	dir := t.TempDir()
	cat := catalog.New()
	cp, err := New(Config{DataDir: dir, DefaultAllow: true, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return cp, cat, dir
}

// registerSidecar registers service's sidecar proxy as allocation alloc's.
func registerSidecar(cat *catalog.Catalog, alloc, service string) {
	cat.Register(catalog.ServiceInstance{ID: service + "-1-sidecar-proxy", Name: service + "-sidecar-proxy", Kind: catalog.KindConnectProxy,
		AllocID: alloc, Address: "127.0.0.1", Port: 21000, Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: service, DestinationServiceID: service + "-1", LocalServicePort: 8080}})
}

// dialAllocSocket serves allocation alloc's socket at sock, declaring no
// proxies, and dials it.
func dialAllocSocket(t *testing.T, cp *ControlPlane, alloc, sock string) *grpc.ClientConn {
	t.Helper()
	return serveDeclared(t, cp, alloc, sock)
}

// checkOver asks the authorization service over conn whether src may
// reach dst.
func checkOver(conn *grpc.ClientConn, cp *ControlPlane, src, dst string) (*authv3.CheckResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID(src)},
		Destination: &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID(dst)},
	}})
}

// TestComposedControlPlane starts the real control plane on loopback and an
// allocation socket, and checks that an intention written through the
// Consul-shaped API decides an ext_authz check made over the socket.
func TestComposedControlPlane(t *testing.T) {
	cp, cat, dir := startComposed(t)
	registerSidecar(cat, "a1", "db") // a1's socket decides checks for db

	consul, err := consulapi.NewClient(&consulapi.Config{Address: cp.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consul.Connect().IntentionUpsert(&consulapi.Intention{SourceName: "web", DestinationName: "db", Action: consulapi.IntentionActionDeny}, nil); err != nil {
		t.Fatalf("IntentionUpsert: %v", err)
	}
	conn := dialAllocSocket(t, cp, "a1", filepath.Join(dir, "alloc", "tmp", "meshlet_grpc.sock"))
	check := func(src string) codes.Code {
		resp, err := checkOver(conn, cp, src, "db")
		if err != nil {
			t.Fatalf("Check over the allocation socket: %v", err)
		}
		return codes.Code(resp.GetStatus().GetCode())
	}
	if got := check("web"); got != codes.PermissionDenied {
		t.Errorf("web -> db = %v, want PermissionDenied", got)
	}
	if got := check("api"); got != codes.OK {
		t.Errorf("api -> db = %v, want OK (default allow)", got)
	}
	// A check about a service no proxy of a1 fronts is refused before it is
	// decided: a task cannot read the mesh's intentions through its socket.
	if _, err := checkOver(conn, cp, "db", "web"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("db -> web checked over a1's socket (a1 fronts db only): %v, want PermissionDenied", err)
	}
	cp.RemoveAllocSocket("a1")
}

// TestAllocSocketBindsStreams checks, on the composed control plane, that
// an allocation's socket serves its own proxy's leaf, refuses another
// allocation's proxy and another service's leaf, and that removing the
// socket ends the streams made through it.
func TestAllocSocketBindsStreams(t *testing.T) {
	cp, cat, dir := startComposed(t)
	for _, p := range []struct{ alloc, svc string }{{"a1", "web"}, {"a2", "db"}} {
		cat.Register(catalog.ServiceInstance{ID: p.svc + "-1", Name: p.svc, AllocID: p.alloc, Address: "127.0.0.1", Port: 8080, Healthy: true, Connect: true})
		registerSidecar(cat, p.alloc, p.svc)
	}
	conn := dialAllocSocket(t, cp, "a1", filepath.Join(dir, "a1", "alloc", "tmp", "meshlet_grpc.sock"))

	cases := []struct {
		name, node, secret string
		want               codes.Code
	}{
		{"own proxy, own leaf", "web-1-sidecar-proxy", xds.LeafSecretName("web"), codes.OK},
		{"own proxy, other leaf", "web-1-sidecar-proxy", xds.LeafSecretName("db"), codes.PermissionDenied},
		{"other allocation's proxy", "db-1-sidecar-proxy", xds.LeafSecretName("db"), codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fetchSecret(t, conn, tc.node, tc.secret)
			if got := status.Code(err); got != tc.want {
				t.Fatalf("fetch %s as %s: %v, want %v", tc.secret, tc.node, err, tc.want)
			}
		})
	}

	st, err := fetchSecret(t, conn, "web-1-sidecar-proxy", xds.LeafSecretName("web"))
	if err != nil {
		t.Fatalf("fetch own leaf: %v", err)
	}
	cp.RemoveAllocSocket("a1")
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after RemoveAllocSocket: %v, want Unavailable", err)
	}
}

// fetchSecret opens an ADS stream as node, asks for one secret and returns
// the stream once the secret arrived, or the stream's error.
func fetchSecret(t *testing.T, conn *grpc.ClientConn, node, name string) (discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.SecretType, ResourceNames: []string{name}}); err != nil {
		return nil, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if len(resp.GetResources()) > 0 {
			return st, nil
		}
		// The leaf may not be signed yet: ACK the empty answer and wait.
		if err := st.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{name},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			return nil, err
		}
	}
}

// A sidecar draining in its group's shutdown_delay (its registration
// already left the catalog, its xDS stream still open) keeps checking the
// connections it finishes; once its stream ends, a socket that declares no
// proxies decides no more (see allocproxies_test.go for one that does).
func TestAllocSocketChecksDuringDrain(t *testing.T) {
	cp, cat, dir := startComposed(t)
	registerSidecar(cat, "a1", "db")
	conn := dialAllocSocket(t, cp, "a1", filepath.Join(dir, "alloc", "run", "meshlet_grpc.sock"))
	check := func() error { _, err := checkOver(conn, cp, "api", "db"); return err }
	st, err := fetchSecret(t, conn, "db-1-sidecar-proxy", xds.LeafSecretName("db"))
	if err != nil {
		t.Fatalf("the sidecar's stream: %v", err)
	}
	cat.DeregisterAlloc("a1") // the services hook's PreKill, before shutdown_delay
	if err := check(); err != nil {
		t.Fatalf("api -> db checked by a1's draining sidecar: %v", err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the drained sidecar's checks refused", func() bool { return status.Code(check()) == codes.PermissionDenied })
}
