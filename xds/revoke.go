package xds

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/acl"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultACLRecheck is how often the tokens of open xDS streams are
// resolved again (Config.ACLRecheck). With the resolver's token cache
// (acl.DefaultTokenTTL) a deleted or expired token loses its stream
// within about the sum of the two.
const DefaultACLRecheck = 30 * time.Second

// revoker ends one stream from outside its handler. go-control-plane's
// servers only return when their receive loop ends, and that loop sits in
// Recv: so Recv is made interruptible. A revoked stream's Recv returns the
// revocation error, the server's loop returns, and the interceptor answers
// the stream with that error instead of the handler's.
type revoker struct {
	grpc.ServerStream
	ctx  context.Context
	done chan struct{}
	once sync.Once
	err  error // set before done is closed
}

type revokerKey struct{}

// revokerOf is the revoker of a stream's context (nil for a stream that
// did not come through the interceptor, e.g. in tests of the callbacks).
func revokerOf(ctx context.Context) *revoker {
	r, _ := ctx.Value(revokerKey{}).(*revoker)
	return r
}

func (r *revoker) Context() context.Context { return r.ctx }

// RecvMsg waits for the next message or the revocation, whichever is
// first. After a revocation the underlying RecvMsg still runs until the
// RPC ends (right after the handler returns); m is not read again.
func (r *revoker) RecvMsg(m any) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	res := make(chan error, 1)
	go func() { res <- r.ServerStream.RecvMsg(m) }()
	select {
	case err := <-res:
		return err
	case <-r.done:
		return r.err
	}
}

// revoke ends the stream with err (a gRPC status error); later calls do
// nothing.
func (r *revoker) revoke(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.done)
	})
}

// revoked is the revocation error, nil while the stream may go on.
func (r *revoker) revoked() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// streamInterceptor makes every ADS stream revocable (see revoker); other
// services of the gRPC server (ext_authz) pass through.
func streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.Contains(info.FullMethod, "AggregatedDiscoveryService") {
		return handler(srv, ss)
	}
	r := &revoker{ServerStream: ss, done: make(chan struct{})}
	r.ctx = context.WithValue(ss.Context(), revokerKey{}, r)
	err := handler(srv, r)
	if rerr := r.revoked(); rerr != nil {
		return rerr
	}
	return err
}

// recheckLoop resolves the tokens of the open streams every interval
// until the server stops.
func (s *Server) recheckLoop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.tracker.recheck()
		}
	}
}

// recheck ends every stream whose token no longer grants what the stream
// was given: the token was deleted or expired, or lost service:write on
// the proxy's destination. A token that cannot be resolved for another
// reason (the servers are unreachable from a client agent) keeps its
// stream: a control-plane outage must not cut running proxies off.
func (t *tracker) recheck() {
	if t.s.cfg.ACL == nil {
		return
	}
	type held struct {
		who   peerInfo
		token string
		g     grant
		rev   *revoker
	}
	var open []held
	t.mu.Lock()
	for _, st := range t.streams {
		if st.grant != nil && st.rev != nil {
			open = append(open, held{st.peer, st.token, *st.grant, st.rev})
		}
	}
	t.mu.Unlock()
	for _, h := range open {
		err := t.s.stillGranted(h.token, h.g)
		if err == nil || !(errors.Is(err, acl.ErrTokenNotFound) || errors.Is(err, acl.ErrPermissionDenied)) {
			if err != nil {
				t.s.log.Debug("could not re-check an xDS stream's token; keeping the stream", "proxy_id", h.g.node, "error", err)
			}
			continue
		}
		t.s.m.revoked.Inc()
		t.s.log.Warn("ending xDS stream: its token no longer grants it", "alloc_id", h.who.allocID, "proxy_id", h.g.node, "error", err)
		h.rev.revoke(status.Errorf(codes.PermissionDenied, "token no longer valid for proxy %q: %v", h.g.node, err))
	}
}

// stillGranted resolves token again and checks it still covers g: a
// management grant (anyNode) needs a management token, any other grant
// service:write on its destination service.
func (s *Server) stillGranted(token string, g grant) error {
	authz, err := s.resolveToken(token)
	if err != nil {
		return err
	}
	switch {
	case g.anyNode:
		if !authz.IsManagement() {
			return acl.ErrPermissionDenied
		}
	case !authz.AllowServiceWrite(g.service):
		return acl.ErrPermissionDenied
	}
	return nil
}
