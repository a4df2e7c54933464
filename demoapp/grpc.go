package demoapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// InstanceHeader is the response header (gRPC metadata) in which
// grpc-hello names itself, so a client can tell instances apart.
const InstanceHeader = "x-instance-id"

// grpcHelloService is the health service name grpc-hello answers SERVING
// for besides "" (the server as a whole): the "hello" call of grpc-get.
const grpcHelloService = "hello"

// grpcHelloServer returns a gRPC server answering grpc.health.v1 for ""
// and "hello" (SERVING; any other name NotFound), every answer carrying
// the header x-instance-id: id.
func grpcHelloServer(id string) *grpc.Server {
	tag := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(InstanceHeader, id))
		return h(ctx, req)
	})
	stag := grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		_ = ss.SetHeader(metadata.Pairs(InstanceHeader, id))
		return h(srv, ss)
	})
	s := grpc.NewServer(tag, stag)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(grpcHelloService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	return s
}

func runGRPCHello(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("grpc-hello", stderr)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on (plaintext HTTP/2)")
	id := fs.String("id", os.Getenv("NOMAD_ALLOC_ID"), "identity sent in the "+InstanceHeader+" header")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", *listen, err)
	}
	fmt.Fprintf(stdout, "grpc-hello listening on %s\n", l.Addr())
	s := grpcHelloServer(*id)
	go func() {
		<-ctx.Done()
		done := make(chan struct{})
		go func() { s.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			s.Stop()
		}
	}()
	if err := s.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("failed to serve gRPC: %w", err)
	}
	return nil
}

func runGRPCGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("grpc-get", stderr)
	n := fs.Int("n", 1, "number of calls (1 to 10000) over one connection, one line each: \"OK <instance id>\" or \"error <code>\"")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of each call")
	every := fs.Duration("every", 0, "pause between calls")
	service := fs.String("service", grpcHelloService, "service name asked of grpc.health.v1 Check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *n < 1 || *n > 10000 {
		return errors.New("usage: meshlet demo-app grpc-get [-n 1..10000] [-timeout D] [-every D] [-service NAME] ADDR")
	}
	// passthrough: the address is dialed as is, one connection for all
	// calls (gRPC multiplexes them as HTTP/2 streams).
	conn, err := grpc.NewClient("passthrough:///"+fs.Arg(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("failed to create a gRPC client for %s: %w", fs.Arg(0), err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for i := 0; i < *n; i++ {
		if i > 0 && *every > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(*every):
			}
		}
		fmt.Fprintln(stdout, grpcCall(ctx, client, *service, *timeout))
	}
	return nil
}

// grpcCall makes one health Check and returns "OK <instance id>" (the
// id "-" when the header is missing), "<STATUS> <id>" for an answer other
// than SERVING, or "error <code>".
func grpcCall(ctx context.Context, c healthpb.HealthClient, service string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var md metadata.MD
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&md))
	if err != nil {
		return "error " + status.Code(err).String()
	}
	id := "-"
	if v := md.Get(InstanceHeader); len(v) > 0 {
		id = strings.Join(v, ",")
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return resp.GetStatus().String() + " " + id
	}
	return "OK " + id
}
