package demoapp

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// startGRPCHello runs `grpc-hello -id id` on a free loopback port until the
// test ends and returns its address.
func startGRPCHello(t *testing.T, id string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- runGRPCHello(ctx, []string{"-listen", addr, "-id", id}, &out, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("grpc-hello: %v", err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpc-hello never listened on %s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The server answers grpc.health.v1 for "" and "hello" with its id in the
// header, NotFound for other names, as a plain grpc-go client sees it.
func TestGRPCHelloServer(t *testing.T) {
	addr := startGRPCHello(t, "v7")
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, svc := range []string{"", "hello"} {
		var md metadata.MD
		resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}, grpc.Header(&md))
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || strings.Join(md.Get(InstanceHeader), ",") != "v7" {
			t.Errorf("Check(%q) = %v, header %v; want SERVING from v7", svc, resp.GetStatus(), md)
		}
	}
	if got := grpcCall(ctx, c, "nope", time.Second); got != "error NotFound" {
		t.Errorf("Check(nope) line = %q, want error NotFound", got)
	}
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// grpc-get makes -n calls over one connection, one "OK <id>" line each.
func TestGRPCGetOneConnection(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	s := grpcHelloServer("b1")
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)

	var out bytes.Buffer
	if err := runGRPCGet(context.Background(), []string{"-n", "25", "-timeout", "2s", l.Addr().String()}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 25 {
		t.Fatalf("%d lines, want 25:\n%s", len(lines), out.String())
	}
	for i, line := range lines {
		if line != "OK b1" {
			t.Fatalf("line %d = %q, want OK b1", i, line)
		}
	}
	if n := l.n.Load(); n != 1 {
		t.Errorf("25 calls used %d connections, want 1", n)
	}
}

// An unreachable address gives one "error Unavailable" line per call and
// exit 0; -service names an unknown service: NotFound.
func TestGRPCGetErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	var out bytes.Buffer
	if err := runGRPCGet(context.Background(), []string{"-n", "2", "-timeout", "1s", dead}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "error Unavailable\nerror Unavailable" {
		t.Errorf("calls to a closed port = %q", got)
	}

	addr := startGRPCHello(t, "x")
	out.Reset()
	if err := runGRPCGet(context.Background(), []string{"-service", "other", addr}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "error NotFound" {
		t.Errorf("-service other = %q, want error NotFound", got)
	}
	for _, args := range [][]string{{}, {"-n", "0", addr}, {addr, addr}} {
		if err := runGRPCGet(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("grpc-get %v succeeded, want a usage error", args)
		}
	}
}

// Main lists both programs.
func TestGRPCAppsListed(t *testing.T) {
	var errOut bytes.Buffer
	Main(nil, io.Discard, &errOut)
	for _, name := range []string{"grpc-hello", "grpc-get"} {
		if !strings.Contains(errOut.String(), name) {
			t.Errorf("usage lacks %s:\n%s", name, errOut.String())
		}
	}
}
