package checks

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// grpcServer serves grpc.health.v1 on l; stopped when the test ends.
func grpcServer(t *testing.T, l net.Listener, opts ...grpc.ServerOption) *health.Server {
	t.Helper()
	hs := health.NewServer()
	s := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return hs
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestGRPC(t *testing.T) {
	l := listenLocal(t)
	hs := grpcServer(t, l)
	hs.SetServingStatus("billing", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("ledger", healthpb.HealthCheckResponse_NOT_SERVING)
	h, p := hostPort(t, l.Addr().String())
	cases := []struct {
		service string
		want    Status
		out     string
	}{
		{"", StatusPassing, "SERVING"}, // the server's overall health
		{"billing", StatusPassing, "billing: SERVING"},
		{"ledger", StatusCritical, "NOT_SERVING"},
		{"unknown", StatusCritical, "NotFound"},
	}
	for _, tc := range cases {
		d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, GRPCService: tc.service, Timeout: 2 * time.Second}
		st, out := runProbe(t, d, nil)
		if st != tc.want || !strings.Contains(out, tc.out) {
			t.Errorf("service %q: %s %q, want %s containing %q", tc.service, st, out, tc.want, tc.out)
		}
	}
	hs.SetServingStatus("billing", healthpb.HealthCheckResponse_NOT_SERVING)
	d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, GRPCService: "billing", Timeout: 2 * time.Second}
	if st, _ := runProbe(t, d, nil); st != StatusCritical {
		t.Fatalf("billing after NOT_SERVING: %s", st)
	}
}

func TestGRPCRefused(t *testing.T) {
	l := listenLocal(t)
	h, p := hostPort(t, l.Addr().String())
	_ = l.Close()
	d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, Timeout: 2 * time.Second}
	start := time.Now()
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "Unavailable") {
		t.Fatalf("%s %q, want critical Unavailable", st, out)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("a refused connection took %s (should fail fast)", el)
	}
}

func TestGRPCTimeout(t *testing.T) {
	// A listener that accepts but never speaks HTTP/2.
	l := listenLocal(t)
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	h, p := hostPort(t, l.Addr().String())
	d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, Timeout: 200 * time.Millisecond}
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "timed out after 200ms") {
		t.Fatalf("%s %q, want critical timed out", st, out)
	}
}

func TestGRPCTLS(t *testing.T) {
	l := listenLocal(t)
	cert := selfSigned(t)
	hs := grpcServer(t, l, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)
	h, p := hostPort(t, l.Addr().String())
	d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, GRPCService: "api", Timeout: 2 * time.Second}
	if st, out := runProbe(t, d, nil); st != StatusCritical {
		t.Fatalf("plaintext to a TLS server: %s %q", st, out)
	}
	d.GRPCUseTLS = true
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "certificate") {
		t.Fatalf("TLS, verifying a self-signed cert: %s %q", st, out)
	}
	d.TLSSkipVerify = true
	if st, out := runProbe(t, d, nil); st != StatusPassing {
		t.Fatalf("TLS skip verify: %s %q", st, out)
	}
}

func TestGRPCTLSServerName(t *testing.T) {
	l := listenLocal(t)
	got := make(chan string, 1)
	hs := grpcServer(t, l, grpc.Creds(credentials.NewTLS(sniRecorder(selfSigned(t), got))))
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)
	h, p := hostPort(t, l.Addr().String())
	d := Definition{ID: "g", Type: TypeGRPC, Address: h, Port: p, GRPCService: "api", Timeout: 2 * time.Second,
		GRPCUseTLS: true, TLSSkipVerify: true, TLSServerName: "api.internal"}
	if st, out := runProbe(t, d, nil); st != StatusPassing {
		t.Fatalf("grpc TLS check: %s %q", st, out)
	}
	if name := <-got; name != "api.internal" {
		t.Fatalf("server name sent %q, want api.internal", name)
	}
}
