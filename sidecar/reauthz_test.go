package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/hashicorp/go-hclog"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// addrChecker is an authorization service that decides on addresses as
// well as identities: it allows web only from an address, until denied.
type addrChecker struct {
	deny  atomic.Bool
	calls atomic.Int32
}

func (c *addrChecker) Check(_ context.Context, req *authv3.CheckRequest, _ ...grpc.CallOption) (*authv3.CheckResponse, error) {
	c.calls.Add(1)
	src := req.GetAttributes().GetSource()
	code := codes.OK
	if c.deny.Load() || src.GetAddress() == nil || src.GetPrincipal() != spiffeID("web") {
		code = codes.PermissionDenied
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code)}}, nil
}

// mtlsPair returns the server side of a loopback TLS connection from web
// (client certificate; none when anonymous) to api, and the client side.
func mtlsPair(t *testing.T, anonymous bool) (server *tls.Conn, client *tls.Conn) {
	t.Helper()
	ca := newTestCA(t, "reauthz")
	pair := func(l *testLeaf) tls.Certificate {
		c, err := tls.X509KeyPair([]byte(l.certPEM), []byte(l.keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair(ca.leaf(t, spiffeID("api")))},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		tc := c.(*tls.Conn)
		_ = tc.Handshake()
		accepted <- tc
	}()
	cfg := &tls.Config{InsecureSkipVerify: true} // the server's identity is not what this tests
	if !anonymous {
		cfg.Certificates = []tls.Certificate{pair(ca.leaf(t, spiffeID("web")))}
	}
	client, err = tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return server, client
}

// TestReauthorize: the periodic re-check asks what the connection's own
// check asked (addresses included), so a service that allows by address
// keeps the connection; a deny closes it; a connection without a client
// identity is never re-checked.
func TestReauthorize(t *testing.T) {
	ctx := context.Background()
	fake := &addrChecker{}
	a := newAuthorizer(fake, "", hclog.NewNullLogger())
	st := newAuthzStats(newStatsRegistry(), "public")
	cfg := &authzConfig{timeout: time.Second}
	down, client := mtlsPair(t, false)
	if !a.authorize(ctx, cfg, st, down, spiffeID("api")) {
		t.Fatal("the connection's own check denied it")
	}
	var relayEnded atomic.Int32 // a TCP relay's upstream side, closed with the connection
	untrack := a.track(down, spiffeID("api"), cfg, st, func() { relayEnded.Add(1) })
	a.reauthorize(ctx)
	if n := st.reauthClosed.Load(); n != 0 || relayEnded.Load() != 0 {
		t.Fatalf("the re-check closed %d allowed connections (relays ended: %d)", n, relayEnded.Load())
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(down, buf); err != nil {
		t.Fatalf("the allowed connection no longer carries data: %v", err)
	}

	fake.deny.Store(true)
	a.reauthorize(ctx)
	if n := st.reauthClosed.Load(); n != 1 || relayEnded.Load() != 1 {
		t.Fatalf("reauthorization_closed = %d after a deny, want 1 (relays ended: %d, want 1)", n, relayEnded.Load())
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(buf); err == nil {
		t.Fatal("the denied connection still answers")
	}
	untrack() // as the connection's handler does once it ends

	anon, _ := mtlsPair(t, true)
	before := fake.calls.Load()
	defer a.track(anon, spiffeID("api"), cfg, st, nil)()
	a.reauthorize(ctx)
	if got := fake.calls.Load() - before; got != 0 {
		t.Fatalf("%d re-checks for a connection without a client identity", got)
	}
}

// epochChecker allows web, marking each allow with its epoch, until denied.
type epochChecker struct {
	deny  atomic.Bool
	epoch atomic.Pointer[string]
	calls atomic.Int32
}

func (c *epochChecker) Check(_ context.Context, req *authv3.CheckRequest, _ ...grpc.CallOption) (*authv3.CheckResponse, error) {
	c.calls.Add(1)
	if c.deny.Load() || req.GetAttributes().GetSource().GetPrincipal() != spiffeID("web") {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)}}, nil
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{AuthzEpochKey: structpb.NewStringValue(*c.epoch.Load())}}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}, DynamicMetadata: md}, nil
}

// TestReauthorizeByEpoch: a pair allowed in the epoch the control plane
// sent last is not asked again while that epoch lasts (up to
// reauthMaxAge); a new epoch has it re-checked at once, without waiting
// for the loop's tick, and a deny then closes its connections.
func TestReauthorizeByEpoch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &epochChecker{}
	e1 := "boot-1"
	fake.epoch.Store(&e1)
	a := newAuthorizer(fake, "", hclog.NewNullLogger())
	a.setEpoch(e1)
	<-a.epochMoved // the first epoch: nothing open to re-check yet
	st := newAuthzStats(newStatsRegistry(), "public")
	cfg := &authzConfig{timeout: time.Second}
	down, client := mtlsPair(t, false)
	if !a.authorize(ctx, cfg, st, down, spiffeID("api")) {
		t.Fatal("the connection's own check denied it")
	}
	defer a.track(down, spiffeID("api"), cfg, st, nil)()

	before := fake.calls.Load()
	a.reauthorize(ctx)
	if n := fake.calls.Load() - before; n != 0 {
		t.Fatalf("%d re-checks of a pair allowed in the current epoch", n)
	}
	a.open.mu.Lock()
	for _, lc := range a.open.pairs {
		lc.checked = time.Now().Add(-reauthMaxAge - time.Second)
	}
	a.open.mu.Unlock()
	a.reauthorize(ctx)
	if n := fake.calls.Load() - before; n != 1 {
		t.Fatalf("%d re-checks of a pair last checked reauthMaxAge ago, want 1", n)
	}
	// A deny of the pair in the same epoch (its new connection refused)
	// drops the cached allow: the open connection is asked about at the
	// next tick, not after reauthMaxAge.
	a.cache.drop([2]string{spiffeID("web"), spiffeID("api")})
	a.reauthorize(ctx)
	if n := fake.calls.Load() - before; n != 2 {
		t.Fatalf("%d re-checks after the pair's allow was dropped, want 2", n)
	}

	// The intentions change: deny, in a new epoch. The loop (its tick an
	// hour away) re-checks at once and closes the connection.
	go a.reauthorizeLoop(ctx, time.Hour)
	fake.deny.Store(true)
	e2 := "boot-2"
	fake.epoch.Store(&e2)
	a.setEpoch(e2)
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := client.Read(buf); err == nil {
		t.Fatal("the denied connection still answers")
	}
	testutil.WaitFor(t, 5*time.Second, "reauthorization_closed counted", func() bool { return st.reauthClosed.Load() == 1 })
}
