package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// gRPC through two sidecars: the client speaks h2c to web's upstream
// listener, web speaks h2 over mTLS to api's public listener, api speaks
// h2c to the gRPC server. Unary calls, server streaming (trailers and
// flushed messages) and gRPC errors all pass.
func TestL7GRPCThroughTwoProxies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)

	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, addr: ln.Addr().String()}},
		apiRoutes(clusterRoute("/", api, nil)), l7Options{h2: true, httpAuthz: true})
	conn, err := grpc.NewClient(m.url("")[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for i := 0; i < 5; i++ {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check through the mesh = %v, %v", resp, err)
		}
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service = %v, want NotFound (grpc-status through both proxies)", err)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "api"})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch first = %v, %v", first, err)
	}
	// A call while the stream is open shares its connection: HTTP/2
	// between the sidecars (HTTP/1.1 would need a second connection).
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"}); err != nil {
		t.Fatalf("Check while streaming: %v", err)
	}
	if n := statValue(t, m.web, "cluster."+api+".upstream_cx_total"); n != 1 {
		t.Fatalf("web opened %d connections to api, want 1 multiplexed HTTP/2 connection", n)
	}
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_NOT_SERVING)
	got := make(chan *healthpb.HealthCheckResponse, 1)
	go func() {
		r, _ := stream.Recv()
		got <- r
	}()
	select {
	case r := <-got:
		if r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("Watch update = %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a streamed message did not arrive through the proxies (not flushed?)")
	}
	if n := statValue(t, m.backends[0].proxy, "http.public_listener.ext_authz.ok"); n < 6 {
		t.Fatalf("per-request ext_authz ok = %d over h2, want every call checked", n)
	}
	if rq := m.cp.authz.lastHTTP.Load(); rq.GetAttributes().GetRequest().GetHttp().GetPath() != "/grpc.health.v1.Health/Check" ||
		rq.GetAttributes().GetSource().GetPrincipal() != spiffeID("web") {
		t.Fatalf("last HTTP check path = %q", rq.GetAttributes().GetRequest().GetHttp().GetPath())
	}
}

// An LDS update drains web's HTTP/2 connections gracefully (GOAWAY): gRPC
// calls running through it all the while never fail.
func TestL7GRPCListenerUpdateDrains(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	api := subsetCluster("")
	rc := apiRoutes(clusterRoute("/", api, nil))
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, addr: ln.Addr().String()}}, rc, l7Options{h2: true})
	conn, err := grpc.NewClient(m.url("")[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	stop := make(chan struct{})
	errs := make(chan error, 1)
	calls := 0
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				errs <- err
				return
			}
			calls++
		}
	}()
	time.Sleep(200 * time.Millisecond)
	for i := 1; i <= 3; i++ {
		m.webStat = fmt.Sprintf("upstream.api.v%d", i)
		v := m.setWeb(rc, nil)
		waitAccepted(t, m.web, typeListener, v)
		time.Sleep(700 * time.Millisecond) // past the 500 ms drain timeout
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Fatalf("a gRPC call failed during listener updates (after %d calls): %v", calls, err)
	}
	if calls == 0 {
		t.Fatal("no call completed")
	}
}

// An HTTP/1.1 client of an http2 upstream: web's HTTP/1.1 downstream, h2
// between the sidecars and to the app (h2c), and back.
func TestL7HTTP1ClientOfHTTP2Upstream(t *testing.T) {
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "proto=%s method=%s body=%s", r.Proto, r.Method, b)
	}))
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	app.Config.Protocols = &protos
	app.Start()
	t.Cleanup(app.Close)
	api := subsetCluster("")
	m := newL7Mesh(t, []l7BackendSpec{{cluster: api, addr: app.Listener.Addr().String()}}, apiRoutes(clusterRoute("/", api, nil)), l7Options{h2: true})
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	code, body, _, err := m.get(client, "/x")
	if err != nil || code != 200 || body != "proto=HTTP/2.0 method=GET body=" {
		t.Fatalf("GET = %d %q %v", code, body, err)
	}
	resp, err := client.Post(m.url("/x"), "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "proto=HTTP/2.0 method=POST body=hello" {
		t.Fatalf("POST = %d %q", resp.StatusCode, b)
	}
}
