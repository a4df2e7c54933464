package sidecar

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeAuthz is the test's Authorization service: it allows every source
// principal except the denied ones.
type fakeAuthz struct {
	authv3.UnimplementedAuthorizationServer
	mu     sync.Mutex
	deny   map[string]bool
	calls  atomic.Int64
	lastRq atomic.Pointer[authv3.CheckRequest]
	// HTTP (per request) checks: paths denied with a 403 and a body.
	denyPaths map[string]bool
	lastHTTP  atomic.Pointer[authv3.CheckRequest]
	// epoch, when set, marks allows as cacheable in that epoch, as
	// meshlet's service does (authzcache.go); httpCalls counts checks of
	// HTTP requests.
	epoch     string
	httpCalls atomic.Int64
}

func (f *fakeAuthz) setDenyPath(path string, deny bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.denyPaths == nil {
		f.denyPaths = map[string]bool{}
	}
	f.denyPaths[path] = deny
}

func (f *fakeAuthz) setDeny(principal string, deny bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deny[principal] = deny
}

func (f *fakeAuthz) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	f.calls.Add(1)
	f.lastRq.Store(req)
	f.mu.Lock()
	denied := f.deny[req.GetAttributes().GetSource().GetPrincipal()]
	hr := req.GetAttributes().GetRequest().GetHttp()
	pathDenied := hr != nil && f.denyPaths[strings.SplitN(hr.GetPath(), "?", 2)[0]]
	epoch := f.epoch
	f.mu.Unlock()
	if hr != nil {
		f.lastHTTP.Store(req)
		f.httpCalls.Add(1)
	}
	if pathDenied {
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "denied by permission"},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
				Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-denied-by", Value: "fake-authz"}}},
				Body:    "denied by permission 1 of intention web => api",
			}},
		}, nil
	}
	if denied {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "denied by intention"}}, nil
	}
	resp := &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}
	if epoch != "" {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{AuthzEpochKey: structpb.NewStringValue(epoch)}}
	}
	return resp, nil
}

func (f *fakeAuthz) setEpoch(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch = e
}

// streamKey identifies a stream: delta and SotW streams count separately.
type streamKey struct {
	delta bool
	id    int64
}

// nackRecord is one NACK the control plane received.
type nackRecord struct {
	node, typeURL, detail string
}

// controlPlane is go-control-plane's ADS server over a SnapshotCache plus
// the fake authz service, on one gRPC server listening on 127.0.0.1:0 and
// on a unix socket. It can be stopped and restarted on the same addresses.
type controlPlane struct {
	t        testing.TB
	cache    cachev3.SnapshotCache
	authz    *fakeAuthz
	tcpAddr  string
	unixPath string
	version  atomic.Int64

	mu      sync.Mutex
	srv     *grpc.Server
	nodes   map[streamKey]string
	nacks   []nackRecord
	running bool
}

func newControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	dir, err := os.MkdirTemp("", "xds")
	if err != nil {
		t.Fatalf("failed to create socket dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cp := &controlPlane{
		t:        t,
		cache:    cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		authz:    &fakeAuthz{deny: map[string]bool{}},
		unixPath: filepath.Join(dir, "xds.sock"),
		nodes:    map[streamKey]string{},
	}
	cp.tcpAddr = "127.0.0.1:0"
	cp.start()
	t.Cleanup(cp.stop)
	return cp
}

// unixAddr is the control plane's unix socket as an XDSAddr.
func (cp *controlPlane) unixAddr() string { return "unix://" + cp.unixPath }

func (cp *controlPlane) callbacks() serverv3.CallbackFuncs {
	record := func(id streamKey, node *corev3.Node, typeURL string, detail *rpcstatus.Status) {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if node != nil {
			cp.nodes[id] = node.GetId()
		}
		if detail != nil {
			cp.nacks = append(cp.nacks, nackRecord{node: cp.nodes[id], typeURL: typeURL, detail: detail.GetMessage()})
		}
	}
	return serverv3.CallbackFuncs{
		StreamRequestFunc: func(id int64, req *discoverygrpc.DiscoveryRequest) error {
			record(streamKey{false, id}, req.GetNode(), req.GetTypeUrl(), req.GetErrorDetail())
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, req *discoverygrpc.DeltaDiscoveryRequest) error {
			record(streamKey{true, id}, req.GetNode(), req.GetTypeUrl(), req.GetErrorDetail())
			return nil
		},
	}
}

// start serves on the control plane's addresses (the same ones after a
// restart).
func (cp *controlPlane) start() {
	cp.t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	tcp, err := net.Listen("tcp", cp.tcpAddr)
	if err != nil {
		cp.t.Fatalf("failed to listen on %s: %v", cp.tcpAddr, err)
	}
	cp.tcpAddr = tcp.Addr().String()
	os.Remove(cp.unixPath)
	unix, err := net.Listen("unix", cp.unixPath)
	if err != nil {
		tcp.Close()
		cp.t.Fatalf("failed to listen on %s: %v", cp.unixPath, err)
	}
	srv := grpc.NewServer()
	xds := serverv3.NewServer(context.Background(), cp.cache, cp.callbacks())
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, xds)
	authv3.RegisterAuthorizationServer(srv, cp.authz)
	go func() { _ = srv.Serve(tcp) }()
	go func() { _ = srv.Serve(unix) }()
	cp.srv, cp.running = srv, true
}

// stop shuts the server down hard (open streams are cut).
func (cp *controlPlane) stop() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.running {
		cp.srv.Stop()
		cp.running = false
	}
}

// set publishes a consistent snapshot for a node under a new version and
// returns that version.
func (cp *controlPlane) set(node string, res map[string][]types.Resource) string {
	cp.t.Helper()
	v := strconv.FormatInt(cp.version.Add(1), 10)
	snap, err := cachev3.NewSnapshot(v, res)
	if err != nil {
		cp.t.Fatalf("failed to build snapshot: %v", err)
	}
	if err := snap.Consistent(); err != nil {
		cp.t.Fatalf("inconsistent snapshot for %s: %v", node, err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		cp.t.Fatalf("failed to set snapshot: %v", err)
	}
	return v
}

// nacksFor returns the NACKs a node sent so far.
func (cp *controlPlane) nacksFor(node string) []nackRecord {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []nackRecord
	for _, n := range cp.nacks {
		if n.node == node {
			out = append(out, n)
		}
	}
	return out
}

func (r nackRecord) String() string { return fmt.Sprintf("%s %s: %s", r.node, r.typeURL, r.detail) }
