package authz

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

type fixture struct {
	ca     *ca.Manager
	ix     *intention.Store
	svc    *Service
	reg    *prometheus.Registry
	client authv3.AuthorizationClient
}

// newFixture serves the authorization service on a real gRPC server on
// 127.0.0.1:0 and returns a client connected to it.
func newFixture(t testing.TB, defaultAllow bool) *fixture {
	t.Helper()
	m, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ix, err := intention.New("", defaultAllow, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := New(m, ix, hclog.NewNullLogger(), reg)
	g := grpc.NewServer()
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &fixture{ca: m, ix: ix, svc: svc, reg: reg, client: authv3.NewAuthorizationClient(conn)}
}

func (f *fixture) upsert(t testing.TB, src, dst, action string) {
	t.Helper()
	if _, err := f.ix.Upsert(intention.Intention{SourceName: src, DestinationName: dst, Action: action}, true); err != nil {
		t.Fatal(err)
	}
}

func request(src, dst string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Principal: src},
		Destination: &authv3.AttributeContext_Peer{Principal: dst},
	}}
}

// check calls the service over gRPC and returns allowed and the reason.
func (f *fixture) check(t *testing.T, req *authv3.CheckRequest) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := f.client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check RPC: %v", err)
	}
	code := codes.Code(resp.GetStatus().GetCode())
	if code != codes.OK && code != codes.PermissionDenied {
		t.Fatalf("unexpected status code %v", code)
	}
	if code == codes.PermissionDenied && resp.GetDeniedResponse().GetStatus().GetCode() != 403 {
		t.Fatalf("denied response without HTTP 403: %v", resp)
	}
	return code == codes.OK, resp.GetStatus().GetMessage()
}

func TestCheckOverGRPC(t *testing.T) {
	f := newFixture(t, false)
	f.upsert(t, "web", "db", "allow")
	f.upsert(t, "api", "db", "deny")
	f.upsert(t, "*", "cache", "deny")
	f.upsert(t, "web", "cache", "allow")
	f.upsert(t, "web", "*", "deny")
	f.upsert(t, "*", "metrics", "allow")
	id := f.ca.SpiffeID
	foreign := strings.Replace(id("web"), f.ca.TrustDomain(), "0b6f2c8e-0000-4000-8000-000000000001.meshlet", 1)
	withExt := request(id("web"), "")
	withExt.Attributes.ContextExtensions = map[string]string{"destination": "db"}
	withMeta := request(id("web"), "")
	withMeta.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"meshlet": {Fields: map[string]*structpb.Value{"destination": structpb.NewStringValue(id("db"))}},
	}}
	cases := []struct {
		name    string
		req     *authv3.CheckRequest
		allowed bool
		reason  string
	}{
		{"allowed by exact intention", request(id("web"), id("db")), true, "web => db (allow)"},
		{"denied by exact intention", request(id("api"), id("db")), false, "api => db (deny)"},
		{"default deny", request(id("other"), id("db")), false, "default policy"},
		{"exact beats wildcard source", request(id("web"), id("cache")), true, "web => cache (allow)"},
		{"wildcard source applies", request(id("api"), id("cache")), false, "* => cache (deny)"},
		{"wildcard source beats wildcard destination", request(id("web"), id("metrics")), true, "* => metrics (allow)"},
		{"wildcard destination applies", request(id("web"), id("queue")), false, "web => * (deny)"},
		{"foreign source trust domain", request(foreign, id("db")), false, "foreign trust domain"},
		{"foreign destination trust domain", request(id("web"), strings.Replace(foreign, "/web", "/db", 1)), false, "foreign trust domain"},
		{"malformed source principal", request("web", id("db")), false, "not a service identity"},
		{"agent identity as source", request("spiffe://"+f.ca.TrustDomain()+"/agent/client/dc/dc1/id/x", id("db")), false, "not a service identity"},
		{"missing source principal", request("", id("db")), false, "no source principal"},
		{"missing destination", request(id("web"), ""), false, "no destination"},
		{"malformed destination", request(id("web"), "spiffe://x/y"), false, "destination identity"},
		{"destination from context extension", withExt, true, "web => db (allow)"},
		{"destination from metadata", withMeta, true, "web => db (allow)"},
		{"empty request", &authv3.CheckRequest{}, false, "no source principal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allowed, reason := f.check(t, tc.req)
			if allowed != tc.allowed {
				t.Fatalf("allowed = %v (%s), want %v", allowed, reason, tc.allowed)
			}
			if !strings.Contains(reason, tc.reason) && !(tc.allowed && reason == "") {
				t.Fatalf("reason %q does not mention %q", reason, tc.reason)
			}
		})
	}
	allow, deny := counter(t, f.reg, "allow"), counter(t, f.reg, "deny")
	if allow != 5 || deny != 12 {
		t.Errorf("decision metrics allow=%v deny=%v, want 5 and 12", allow, deny)
	}
}

func TestDecisionFollowsIntentionChanges(t *testing.T) {
	f := newFixture(t, true)
	req := request(f.ca.SpiffeID("web"), f.ca.SpiffeID("db"))
	steps := []struct {
		change  func()
		allowed bool
	}{
		{func() {}, true}, // default allow
		{func() { f.upsert(t, "web", "db", "deny") }, false},
		{func() { f.upsert(t, "web", "db", "allow") }, true},
		{func() { f.upsert(t, "*", "db", "deny") }, true}, // exact still wins
		{func() {
			if err := f.ix.Delete("web", "db"); err != nil {
				t.Fatal(err)
			}
		}, false}, // now *→db decides
	}
	for i, s := range steps {
		s.change()
		if allowed, reason := f.check(t, req); allowed != s.allowed {
			t.Fatalf("step %d: allowed = %v (%s), want %v", i, allowed, reason, s.allowed)
		}
	}
}

func TestAuthorize(t *testing.T) {
	f := newFixture(t, false)
	f.upsert(t, "web", "db", "allow")
	d, err := f.svc.Authorize(f.ca.SpiffeID("web"), "db")
	if err != nil || !d.Allowed || d.Matched == nil || d.Matched.Precedence != 9 {
		t.Fatalf("Authorize = %+v, %v", d, err)
	}
	d, err = f.svc.Authorize(f.ca.SpiffeID("api"), "db")
	if err != nil || d.Allowed || d.Matched != nil || d.Reason == "" {
		t.Fatalf("Authorize default = %+v, %v", d, err)
	}
	if _, err := f.svc.Authorize("not-a-uri", "db"); !errors.Is(err, ErrInvalidRequest) || !errors.Is(err, ca.ErrInvalidSpiffeID) {
		t.Fatalf("malformed source: %v", err)
	}
	if _, err := f.svc.Authorize(f.ca.SpiffeID("web"), "d*"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("malformed destination: %v", err)
	}
	foreign := strings.Replace(f.ca.SpiffeID("web"), f.ca.TrustDomain(), "example.org", 1)
	if d, err := f.svc.Authorize(foreign, "db"); err != nil || d.Allowed {
		t.Fatalf("foreign: %+v, %v", d, err)
	}
}

func counter(t testing.TB, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != decisionsMetricsName {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "result") == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
