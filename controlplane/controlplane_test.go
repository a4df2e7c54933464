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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/xds"
)

// TestComposedControlPlane starts the real control plane on loopback and an
// allocation socket, and checks that an intention written through the
// Consul-shaped API decides an ext_authz check made over the socket.
func TestComposedControlPlane(t *testing.T) {
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
	// Allocation a1 runs db's sidecar: its socket decides checks for db.
	cat.Register(catalog.ServiceInstance{ID: "db-1-sidecar-proxy", Name: "db-sidecar-proxy", Kind: catalog.KindConnectProxy,
		AllocID: "a1", Address: "127.0.0.1", Port: 21000, Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "db", DestinationServiceID: "db-1", LocalServicePort: 8080}})

	consul, err := consulapi.NewClient(&consulapi.Config{Address: cp.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consul.Connect().IntentionUpsert(&consulapi.Intention{SourceName: "web", DestinationName: "db", Action: consulapi.IntentionActionDeny}, nil); err != nil {
		t.Fatalf("IntentionUpsert: %v", err)
	}

	sock := filepath.Join(dir, "alloc", "tmp", "meshlet_grpc.sock")
	if err := cp.ServeAllocSocket("a1", sock, ""); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(src string) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source:      &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID(src)},
			Destination: &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID("db")},
		}})
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID("db")},
		Destination: &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID("web")},
	}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("db -> web checked over a1's socket (a1 fronts db only): %v, want PermissionDenied", err)
	}
	cp.RemoveAllocSocket("a1")
}

// TestAllocSocketBindsStreams checks, on the composed control plane, that
// an allocation's socket serves its own proxy's leaf, refuses another
// allocation's proxy and another service's leaf, and that removing the
// socket ends the streams made through it.
func TestAllocSocketBindsStreams(t *testing.T) {
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
	for _, p := range []struct{ alloc, svc string }{{"a1", "web"}, {"a2", "db"}} {
		cat.Register(catalog.ServiceInstance{ID: p.svc + "-1", Name: p.svc, AllocID: p.alloc, Address: "127.0.0.1", Port: 8080, Healthy: true, Connect: true})
		cat.Register(catalog.ServiceInstance{
			ID: p.svc + "-1-sidecar-proxy", Name: p.svc + "-sidecar-proxy", Kind: catalog.KindConnectProxy, AllocID: p.alloc,
			Address: "127.0.0.1", Port: 21000, Healthy: true,
			Proxy: &catalog.Proxy{DestinationServiceName: p.svc, DestinationServiceID: p.svc + "-1", LocalServicePort: 8080},
		})
	}
	sock := filepath.Join(dir, "a1", "alloc", "tmp", "meshlet_grpc.sock")
	if err := cp.ServeAllocSocket("a1", sock, ""); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

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
// connections it finishes; once its stream ends, its socket decides no more.
func TestAllocSocketChecksDuringDrain(t *testing.T) {
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
	cat.Register(catalog.ServiceInstance{ID: "db-1-sidecar-proxy", Name: "db-sidecar-proxy", Kind: catalog.KindConnectProxy,
		AllocID: "a1", Address: "127.0.0.1", Port: 21000, Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "db", DestinationServiceID: "db-1", LocalServicePort: 8080}})
	sock := filepath.Join(dir, "alloc", "run", "meshlet_grpc.sock")
	if err := cp.ServeAllocSocket("a1", sock, ""); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source:      &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID("api")},
			Destination: &authv3.AttributeContext_Peer{Principal: cp.CA.SpiffeID("db")},
		}})
		return err
	}
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
