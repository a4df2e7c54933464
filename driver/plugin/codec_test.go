package plugin

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
)

// testJSONCodec is a client-side JSON codec, as a caller probing for
// application/grpc+json would use.
type testJSONCodec struct{}

func (testJSONCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := json.Marshal(v)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (testJSONCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return json.Unmarshal(data.Materialize(), v)
}

func (testJSONCodec) Name() string { return "json" }

// Importing the plugin package registers no codec: a gRPC server built as
// the agent builds its xDS/ext_authz server (plain grpc.NewServer, in a
// process that imports this package) serves protobuf and rejects a call
// with content-type application/grpc+json.
func TestAgentGRPCServerRejectsJSON(t *testing.T) {
	if c := encoding.GetCodecV2("json"); c != nil {
		t.Errorf("a codec named json is registered process-wide: %T", c)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("failed to create the client: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("protobuf Check = %v, %v; want SERVING", resp, err)
	}

	var jresp struct {
		Status int `json:"status"`
	}
	req := struct {
		Service string `json:"service"`
	}{}
	err = cc.Invoke(ctx, "/grpc.health.v1.Health/Check", &req, &jresp, grpc.ForceCodecV2(testJSONCodec{}))
	if err == nil {
		t.Fatalf("application/grpc+json Check succeeded (status %d); want it rejected", jresp.Status)
	}
	t.Logf("application/grpc+json Check rejected: %v", err)
}
