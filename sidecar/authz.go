package sidecar

import (
	"context"
	"net"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// maxAuthzDecisions bounds the fail-static decision cache.
const maxAuthzDecisions = 4096

// checker is the narrow interface of the authorization service we call:
// envoy.service.auth.v3.Authorization/Check.
type checker interface {
	Check(ctx context.Context, in *authv3.CheckRequest, opts ...grpc.CallOption) (*authv3.CheckResponse, error)
}

// authorizer runs the ext_authz network filter's Check over the control
// plane's gRPC connection. When the call fails (the control plane is away),
// it falls back to the last decision it got for the same source and
// destination principals — the same fail-static rule as for configuration —
// and, without one, fails closed unless failure_mode_allow is set.
type authorizer struct {
	client checker
	token  string
	log    hclog.Logger

	mu   sync.Mutex
	last map[[2]string]bool

	// open are the authorized connections, re-checked by reauthorizeLoop.
	open openConns
	// cache holds the cacheable allows (authzcache.go).
	cache authzCache
	// epochMoved wakes the re-authorization loop when the epoch changes.
	epochMoved chan struct{}
}

func newAuthorizer(client checker, token string, log hclog.Logger) *authorizer {
	return &authorizer{client: client, token: token, log: log, last: map[[2]string]bool{}, epochMoved: make(chan struct{}, 1)}
}

// authorize decides whether a downstream connection may proceed. down is the
// (possibly TLS) connection after its handshake; ourURI is our own SPIFFE ID.
func (a *authorizer) authorize(ctx context.Context, cfg *authzConfig, st *authzStats, down net.Conn, ourURI string) bool {
	st.total.Add(1)
	srcURI := peerURI(down)
	req := &authv3.CheckRequest{Attributes: checkAttributes(down, srcURI, ourURI)}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if a.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-consul-token", a.token)
	}
	key := [2]string{srcURI, ourURI}
	resp, err := a.client.Check(ctx, req)
	if err != nil {
		st.errors.Add(1)
		a.mu.Lock()
		allowed, known := a.last[key]
		a.mu.Unlock()
		switch {
		case known:
			st.staleDecision.Add(1)
			a.log.Debug("authorization check failed, using the last decision", "source", srcURI, "allowed", allowed, "error", err)
			a.count(st, allowed)
			return allowed
		case cfg.failureModeAllow:
			st.failureModeAllowed.Add(1)
			a.log.Warn("authorization check failed, allowing (failure_mode_allow)", "source", srcURI, "error", err)
			return true
		}
		a.log.Warn("authorization check failed, denying", "source", srcURI, "error", err)
		return false
	}
	allowed := resp.GetStatus().GetCode() == int32(codes.OK)
	a.mu.Lock()
	if len(a.last) >= maxAuthzDecisions {
		clear(a.last)
	}
	a.last[key] = allowed
	a.mu.Unlock()
	a.count(st, allowed)
	if allowed {
		a.cache.put(key, responseEpoch(resp))
	} else {
		a.cache.drop(key)
	}
	if !allowed {
		a.log.Debug("connection denied", "source", srcURI, "destination", ourURI, "reason", resp.GetStatus().GetMessage())
	}
	return allowed
}

func (a *authorizer) count(st *authzStats, allowed bool) {
	if allowed {
		st.ok.Add(1)
	} else {
		st.denied.Add(1)
	}
}

func socketAddress(addr net.Addr) *corev3.Address {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil
	}
	p, _ := strconv.ParseUint(port, 10, 32)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}
