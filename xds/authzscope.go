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
	if dest != "" && s.allocDecides(who, dest) {
		return nil
	}
	// Debug only: a task could otherwise flood the log with refused checks.
	err := fmt.Errorf("allocation %s: no proxy of the allocation fronts %q", who.allocID, dest)
	s.log.Debug("authorization check refused", "alloc_id", who.allocID, "service", dest, "error", err)
	return status.Error(codes.PermissionDenied, err.Error())
}

// allocDecides reports whether one of the proxies of who's allocation
// accepts connections for service: declared by its socket (from the job:
// a sidecar draining in the group's shutdown_delay, whose registration
// already left, or one whose registration an agent restart has not
// restored yet, still checks connections, whether or not its xDS stream
// reconnected), registered in the catalog, or holding an xDS stream
// granted that service's leaf.
func (s *Server) allocDecides(who peerInfo, service string) bool {
	// A live proxy holds a granted stream: the tracker answers first,
	// the allocation's registrations (a proxy between its registration
	// and its first request) after.
	return s.tracker.allocGranted(who.allocID, service) || s.allocProxyFor(who, service)
}

func (s *Server) allocProxyFor(who peerInfo, service string) bool {
	if who.sock != nil && s.frontsAny(who.sock.proxies, service) {
		return true
	}
	var registered []catalog.ServiceInstance
	for _, p := range s.cfg.Catalog.ByAlloc(who.allocID) {
		if s.isLocal(p) {
			registered = append(registered, p)
		}
	}
	return s.frontsAny(registered, service)
}

// frontsAny reports whether one of proxies accepts connections for
// service: its destination, or a service its terminating gateway links.
func (s *Server) frontsAny(proxies []catalog.ServiceInstance, service string) bool {
	for _, p := range proxies {
		if !catalog.IsProxyKind(p.Kind) || p.Proxy == nil {
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
