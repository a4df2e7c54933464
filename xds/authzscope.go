package xds

import (
	"context"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/catalog"
)

// authzCheckMethod is ext_authz's Check, served on this server's listeners.
const authzCheckMethod = "/envoy.service.auth.v3.Authorization/Check"

// unaryInterceptor scopes ext_authz checks that come through an
// allocation's socket to what that allocation's proxies decide: a check
// whose destination is one of their services (a terminating gateway's
// linked services included). Any other is refused before it is decided,
// so a task cannot read the mesh's intentions through its socket. Host
// listeners are the host's (see hostGrant).
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == authzCheckMethod {
		if err := s.scopeCheck(ctx, req); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (s *Server) scopeCheck(ctx context.Context, req any) error {
	who := peerOf(ctx)
	if who.kind != peerAlloc {
		return nil
	}
	r, ok := req.(*authv3.CheckRequest)
	if !ok {
		return status.Error(codes.InvalidArgument, "not a CheckRequest")
	}
	dest := authz.DestinationService(r.GetAttributes())
	if dest != "" && s.allocDecides(who.allocID, dest) {
		return nil
	}
	// Debug only: a task could otherwise flood the log with refused checks.
	err := fmt.Errorf("allocation %s: no proxy of the allocation fronts %q", who.allocID, dest)
	s.log.Debug("authorization check refused", "alloc_id", who.allocID, "service", dest, "error", err)
	return status.Error(codes.PermissionDenied, err.Error())
}

// allocDecides reports whether one of allocation allocID's proxies
// accepts connections for service: registered in the catalog, or holding
// an xDS stream granted that service's leaf (a draining sidecar, whose
// registration already left during the group's shutdown_delay, still
// checks the connections it finishes).
func (s *Server) allocDecides(allocID, service string) bool {
	// A live proxy holds a granted stream: the tracker answers first,
	// the allocation's registrations (a proxy between its registration
	// and its first request) after.
	return s.tracker.allocGranted(allocID, service) || s.allocRegisteredFor(allocID, service)
}

func (s *Server) allocRegisteredFor(allocID, service string) bool {
	for _, p := range s.cfg.Catalog.ByAlloc(allocID) {
		if !catalog.IsProxyKind(p.Kind) || p.Proxy == nil || !s.isLocal(p) {
			continue
		}
		if p.Proxy.DestinationServiceName == service {
			return true
		}
		if p.Kind == catalog.KindTerminatingGateway {
			g := proxyGrant(p.ID, p)
			if s.linkedLeaf(&g, LeafSecretName(service)) {
				return true
			}
		}
	}
	return false
}
