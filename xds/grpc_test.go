package xds

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver
)

const (
	childEnv  = "MESHLET_XDS_TEST_GRPC_CHILD"
	targetEnv = "MESHLET_XDS_TEST_GRPC_TARGET"
)

// TestMain lets the test binary act as a proxyless gRPC client: gRPC-Go
// reads its xDS bootstrap at init, so the client runs in a child process
// started with GRPC_XDS_BOOTSTRAP_CONFIG set.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(grpcChild())
	}
	os.Exit(m.Run())
}

// grpcChild dials xds:///<target>, calls the health service and prints
// "OK <status> <peer>" on success.
func grpcChild() int {
	target := os.Getenv(targetEnv)
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: target}, grpc.WaitForReady(true), grpc.Peer(&p))
	if err != nil {
		fmt.Println("check:", err)
		return 1
	}
	fmt.Println("OK", resp.GetStatus(), p.Addr)
	return 0
}

func TestProxylessGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	e := newEnv(t, hclog.Warn)

	backend := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("greeter", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(backend, hs)
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(bl) }()
	t.Cleanup(backend.Stop)
	port := bl.Addr().(*net.TCPAddr).Port
	e.plain("greeter-1", "greeter", "127.0.0.1", port)

	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"proxyless-client-1"}}`, e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", targetEnv+"=greeter", "GRPC_XDS_BOOTSTRAP_CONFIG="+bootstrap)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gRPC xDS client failed: %v\n%s", err, out)
	}
	t.Logf("child: %s", strings.TrimSpace(string(out)))
	want := fmt.Sprintf("OK SERVING 127.0.0.1:%d", port)
	if !strings.Contains(string(out), want) {
		t.Fatalf("child output %q, want %q", out, want)
	}
}
