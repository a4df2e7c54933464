package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/xds"
)

// sidecarIdentity is service's sidecar as allocation alloc's job declares
// it (registerSidecar's ID).
func sidecarIdentity(alloc, service string) catalog.ServiceInstance {
	return catalog.ServiceInstance{ID: service + "-1-sidecar-proxy", Name: service + "-sidecar-proxy",
		Kind: catalog.KindConnectProxy, AllocID: alloc, Proxy: &catalog.Proxy{DestinationServiceName: service}}
}

// serveDeclared serves allocation alloc's socket for proxies and dials it.
func serveDeclared(t *testing.T, cp *ControlPlane, alloc, sock string, proxies ...catalog.ServiceInstance) *grpc.ClientConn {
	t.Helper()
	if err := cp.ServeAllocSocket(alloc, sock, "", proxies); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// askSecret opens an ADS stream as node and asks for one secret; the
// stream ends with the test.
func askSecret(t *testing.T, conn *grpc.ClientConn, node, name string) discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return askSecretCtx(ctx, t, conn, node, name)
}

func askSecretCtx(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node, name string) discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	st, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.SecretType, ResourceNames: []string{name}}); err != nil {
		t.Fatal(err)
	}
	return st
}

type recvResult struct {
	resp *discoverygrpc.DiscoveryResponse
	err  error
}

// recvAsync receives st's next response in the background.
func recvAsync(st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient) <-chan recvResult {
	ch := make(chan recvResult, 1)
	go func() {
		resp, err := st.Recv()
		ch <- recvResult{resp, err}
	}()
	return ch
}

// expectParked checks that a stream was accepted and is waiting for its
// proxy's resources: neither refused nor answered (an empty answer would
// take from the proxy what it holds) within a second. It returns the
// pending receive.
func expectParked(t *testing.T, st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient) <-chan recvResult {
	t.Helper()
	ch := recvAsync(st)
	select {
	case r := <-ch:
		t.Fatalf("the reconnected sidecar's stream: answer %v, error %v; want it accepted and waiting", r.resp, r.err)
	case <-time.After(time.Second):
	}
	return ch
}

// expectKept checks for a second that whatever a stream is sent still
// holds the leaf secret (nothing withdraws it), acknowledging each answer.
func expectKept(t *testing.T, st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, leaf string) {
	t.Helper()
	deadline := time.After(time.Second)
	for {
		ch := recvAsync(st)
		select {
		case r := <-ch:
			if r.err != nil || len(r.resp.GetResources()) != 1 {
				t.Fatalf("the deregistered sidecar's open stream: answer %v, error %v; want its leaf kept", r.resp, r.err)
			}
			if err := st.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{leaf},
				VersionInfo: r.resp.GetVersionInfo(), ResponseNonce: r.resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			return
		}
	}
}

// expectLeaf waits for the pending receive to bring the leaf.
func expectLeaf(t *testing.T, ch <-chan recvResult) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || len(r.resp.GetResources()) != 1 {
			t.Fatalf("after registration: answer %v, error %v; want the leaf", r.resp, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registered sidecar's stream got no answer")
	}
}

// A sidecar draining in its group's shutdown_delay (deregistered first)
// keeps its configuration while its xDS stream lives (Consul ends the
// stream and Envoy keeps its last config; withdrawing it would cut the
// requests the delay is for), and when its stream reconnects it keeps its
// grant: the stream is accepted (and waits, so nothing is taken from the
// proxy), and checks for its service go on being decided, while checks
// for any other service are still refused.
func TestAllocSocketSidecarReconnectsDuringDrain(t *testing.T) {
	cp, cat, dir := startComposed(t)
	registerSidecar(cat, "a1", "db")
	conn := serveDeclared(t, cp, "a1", filepath.Join(dir, "a1", "meshlet_grpc.sock"), sidecarIdentity("a1", "db"))
	node, leaf := "db-1-sidecar-proxy", xds.LeafSecretName("db")
	ctx, endFirst := context.WithCancel(context.Background())
	defer endFirst()
	first := askSecretCtx(ctx, t, conn, node, leaf)
	for got := false; !got; {
		resp, err := first.Recv()
		if err != nil {
			t.Fatalf("the sidecar's stream: %v", err)
		}
		got = len(resp.GetResources()) > 0
		// The leaf may not be signed yet: ACK and wait.
		if err := first.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{leaf},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	cat.DeregisterAlloc("a1") // the services hook's PreKill, before shutdown_delay
	expectKept(t, first, leaf)
	host, err := grpc.NewClient(cp.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if resp, err := askSecret(t, host, "probe", leaf).Recv(); err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("db's leaf while its deregistered sidecar is connected: %v, %v; want it kept", resp, err)
	}
	endFirst()
	testutil.WaitFor(t, 10*time.Second, "the sidecar's first stream ended", func() bool { return !cp.XDS.ProxyStatus(node).Connected })
	testutil.WaitFor(t, 10*time.Second, "db's leaf withdrawn once its sidecar's stream ended", func() bool {
		resp, err := askSecret(t, host, "probe", leaf).Recv()
		return err == nil && len(resp.GetResources()) == 0
	})
	if _, err := checkOver(conn, cp, "api", "db"); err != nil {
		t.Fatalf("api -> db between the sidecar's streams: %v", err)
	}

	again := expectParked(t, askSecret(t, conn, node, leaf))
	if _, err := checkOver(conn, cp, "api", "db"); err != nil {
		t.Fatalf("api -> db checked by a1's reconnected draining sidecar: %v", err)
	}
	if _, err := checkOver(conn, cp, "db", "web"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("db -> web over a1's socket (a1 fronts db only): %v, want PermissionDenied", err)
	}
	registerSidecar(cat, "a1", "db") // not in the test's story, but shows the stream is live
	expectLeaf(t, again)
}

// After an agent restart the allocation's socket is served before its
// services are registered again: its sidecar's reconnecting stream is
// accepted and waits for its resources, and checks for its service are
// decided meanwhile. Neither opens anything else: another service, another
// allocation's proxy, or a proxy the job does not declare.
func TestAllocSocketSidecarReconnectsAfterRestart(t *testing.T) {
	cp, cat, dir := startComposed(t) // a fresh agent: the catalog is empty
	conn := serveDeclared(t, cp, "a1", filepath.Join(dir, "a1", "meshlet_grpc.sock"), sidecarIdentity("a1", "db"))
	serveDeclared(t, cp, "a2", filepath.Join(dir, "a2", "meshlet_grpc.sock"), sidecarIdentity("a2", "web"))
	node, leaf := "db-1-sidecar-proxy", xds.LeafSecretName("db")

	if _, err := checkOver(conn, cp, "api", "db"); err != nil {
		t.Fatalf("api -> db checked by a1's sidecar before its registration: %v", err)
	}
	pending := expectParked(t, askSecret(t, conn, node, leaf))
	for _, dst := range []string{"web", "api"} {
		if _, err := checkOver(conn, cp, "db", dst); status.Code(err) != codes.PermissionDenied {
			t.Errorf("db -> %s over a1's socket: %v, want PermissionDenied", dst, err)
		}
	}
	refused := []struct{ what, node, secret string }{
		{"another allocation's proxy", "web-1-sidecar-proxy", xds.LeafSecretName("web")},
		{"a proxy the job does not declare", "api-1-sidecar-proxy", xds.LeafSecretName("api")},
		{"its proxy, another leaf", node, xds.LeafSecretName("web")},
	}
	for _, r := range refused {
		if _, err := askSecret(t, conn, r.node, r.secret).Recv(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s over a1's socket: %v, want PermissionDenied", r.what, err)
		}
	}

	registerSidecar(cat, "a1", "db") // the services hook runs
	expectLeaf(t, pending)
	cp.RemoveAllocSocket("a1")
	if _, err := checkOver(conn, cp, "api", "db"); err == nil {
		t.Error("a check went through a removed socket")
	}
}
