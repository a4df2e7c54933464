package acl

import (
	"context"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	consulapi "github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/xds"
)

// sdsAsk opens an ADS stream to the agent's gRPC port (the host listener,
// TCP) with token as x-consul-token, asks for the named secrets as node,
// and returns how many secrets came back, or the stream's error code.
func sdsAsk(t *testing.T, a *framework.Agent, token, node string, names ...string) (int, codes.Code) {
	t.Helper()
	conn, err := grpc.NewClient(a.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-consul-token", token)
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: resource.SecretType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, status.Code(err)
	}
	return len(resp.GetResources()), codes.OK
}

// proxyID is the sidecar proxy ID of service's instance.
func proxyID(t *testing.T, a *framework.Agent, service string) string {
	t.Helper()
	var id string
	a.Eventually(30*time.Second, service+"'s sidecar registered", func() bool {
		entries, _, err := a.Consul().Catalog().Service(service+"-sidecar-proxy", "", nil)
		if err == nil && len(entries) == 1 {
			id = entries[0].ServiceID
		}
		return id != ""
	})
	return id
}

// A token with service write on count-api gets count-api's key and
// nothing else: not count-dashboard's leaf on the Consul-shaped leaf
// endpoint, nor over xDS on the TCP gRPC port, where it also cannot act
// as count-dashboard's proxy; without a token the gRPC port serves
// nothing.
func TestServiceTokenGetsOnlyItsOwnKey(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	a.RunningAllocs(a.RunJob("input/mesh.hcl"), 2)
	apiProxy, dashProxy := proxyID(t, a, "count-api"), proxyID(t, a, "count-dashboard")
	policy(t, a, "count-api-identity", `service "count-api" { policy = "write" }`)
	svc := token(t, a, "count-api-sidecar", "count-api-identity")

	c, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(a.ConnectAddr, "http://"), Token: svc})
	if err != nil {
		t.Fatal(err)
	}
	if leaf, _, err := c.Agent().ConnectCALeaf("count-api", nil); err != nil || leaf.PrivateKeyPEM == "" {
		t.Errorf("count-api's own leaf with its token: %v", err)
	}
	if _, _, err := c.Agent().ConnectCALeaf("count-dashboard", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("count-dashboard's leaf with count-api's token: %v, want 403", err)
	}

	own, other := xds.LeafSecretName("count-api"), xds.LeafSecretName("count-dashboard")
	if n, code := sdsAsk(t, a, svc, apiProxy, own); code != codes.OK || n != 1 {
		t.Errorf("xDS on TCP, count-api's token as its proxy asking its leaf: %d secrets, %v", n, code)
	}
	for _, c := range []struct {
		what, token, node, name string
	}{
		{"count-api's token asking count-dashboard's leaf", svc, apiProxy, other},
		{"count-api's token acting as count-dashboard's proxy", svc, dashProxy, other},
		{"no token", "", apiProxy, own},
		{"a forged token", "00000000-0000-4000-8000-000000000000", apiProxy, own},
	} {
		if _, code := sdsAsk(t, a, c.token, c.node, c.name); code != codes.PermissionDenied {
			t.Errorf("xDS on TCP, %s: %v, want PermissionDenied", c.what, code)
		}
	}
	// The management token (operators, `connect envoy` by hand) still gets
	// any proxy's.
	if n, code := sdsAsk(t, a, a.Token, dashProxy, other); code != codes.OK || n != 1 {
		t.Errorf("xDS on TCP with the management token: %d secrets, %v", n, code)
	}
}
