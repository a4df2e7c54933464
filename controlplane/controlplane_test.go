package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	consulapi "github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet/meshlet/catalog"
)

// TestComposedControlPlane starts the real control plane on loopback and an
// allocation socket, and checks that an intention written through the
// Consul-shaped API decides an ext_authz check made over the socket.
func TestComposedControlPlane(t *testing.T) {
	dir := t.TempDir()
	cp, err := New(Config{DataDir: dir, DefaultAllow: true, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, catalog.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)

	consul, err := consulapi.NewClient(&consulapi.Config{Address: cp.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consul.Connect().IntentionUpsert(&consulapi.Intention{SourceName: "web", DestinationName: "db", Action: consulapi.IntentionActionDeny}, nil); err != nil {
		t.Fatalf("IntentionUpsert: %v", err)
	}

	sock := filepath.Join(dir, "alloc", "tmp", "meshlet_grpc.sock")
	if err := cp.ServeAllocSocket("a1", sock); err != nil {
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
	cp.RemoveAllocSocket("a1")
}
