package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ErrNotSocket: a path where a socket should go holds another kind of file.
var ErrNotSocket = errors.New("path exists and is not a socket")

// grant is what one xDS stream may ask for. It is fixed by the stream's
// first request that names a node and checked on every request after it.
type grant struct {
	node    string // the node the grant was given to
	anyNode bool   // the stream may switch to another node ID
	leaf    string // the only leaf secret allowed, unless allSecrets
	service string // the proxy's destination service (leaf's owner)
	// gateway names the terminating gateway the proxy is: it may also have
	// the leaves of the services its entry links, as linked now.
	gateway    string
	allSecrets bool
}

// allowsSecret reports whether the grant covers a secret name. The roots are
// public; "*" (an explicit wildcard) only ever yields the node's own secrets.
func (g grant) allowsSecret(name string) bool {
	return g.allSecrets || name == RootsSecret || name == explicitWildcard || name == g.leaf
}

const explicitWildcard = "*"

// tokenMetadata is the gRPC metadata key of an xDS client's ACL token
// (Consul's name; Envoy's bootstrap sends it as initial_metadata).
const tokenMetadata = "x-consul-token"

// aclResolveTimeout bounds the resolution of a stream's token.
const aclResolveTimeout = 10 * time.Second

// hostGrant is the policy of the host-local listeners (the TCP listener on
// 127.0.0.1:8502, and any listener passed to Serve directly). Without ACLs
// whoever reaches them runs on the host, where root and the agent's
// neighbours can read the CA's key files anyway, so the trust boundary is
// the host itself and every node ID and every resource is served. With
// ACLs the stream's token decides, as in Consul: a management token gets
// everything; any other token may only act as a connect-proxy registered
// on this node whose destination service it has service:write on, and
// only receive that service's leaf.
func (s *Server) hostGrant(token, node string) (grant, error) {
	if s.cfg.ACL == nil {
		return grant{anyNode: true, allSecrets: true}, nil
	}
	authz, err := s.resolveToken(token)
	if err != nil {
		return grant{}, err
	}
	if authz.IsManagement() {
		return grant{anyNode: true, allSecrets: true}, nil
	}
	if node == "" {
		return grant{}, errors.New("the stream's first request must name its node (the proxy ID)")
	}
	inst, ok := s.localProxy(node)
	if !ok || inst.Proxy == nil {
		return grant{}, fmt.Errorf("node %q is not a connect proxy registered in the catalog on this node", node)
	}
	dest := inst.Proxy.DestinationServiceName
	if !authz.AllowServiceWrite(dest) {
		return grant{}, fmt.Errorf("%w: the token has no service:write on %q (proxy %q)", acl.ErrPermissionDenied, dest, node)
	}
	return proxyGrant(node, inst), nil
}

// proxyGrant is the grant of proxy node: its destination's leaf, and for a
// terminating gateway its linked services' leaves.
func proxyGrant(node string, inst catalog.ServiceInstance) grant {
	dest := inst.Proxy.DestinationServiceName
	g := grant{node: node, leaf: LeafSecretName(dest), service: dest}
	if inst.Kind == catalog.KindTerminatingGateway {
		g.gateway = inst.Name
	}
	return g
}

// linkedLeaf reports whether secret is the leaf of a service linked to
// the terminating gateway of grant g (by its entry as it is now).
func (s *Server) linkedLeaf(g *grant, secret string) bool {
	if g.gateway == "" || s.cfg.ConfigEntries == nil {
		return false
	}
	svc, ok := strings.CutPrefix(secret, LeafSecretName(""))
	if !ok {
		return false
	}
	set, _ := s.cfg.ConfigEntries.Current()
	_, linked := set.LinkedService(g.gateway, svc)
	return linked
}

// allocGrant is the policy of an allocation's socket: a stream may only act
// as a connect-proxy registered in the catalog with that allocation's ID,
// and may only receive the leaf of that proxy's destination service (plus
// the shared roots, endpoints and proxyless resources, and its own
// listeners and clusters, which are looked up by its node ID). With ACLs
// the stream's token must also have service:write on that service (the
// sidecar's service identity token), so another task of the allocation
// that reaches the socket cannot take the sidecar's identity.
// A proxy the socket declares (WithAllocProxies) may connect while it is
// not registered (see allocproxies.go).
func (s *Server) allocGrant(who peerInfo, token, node string) (grant, error) {
	if node == "" {
		return grant{}, errors.New("the stream's first request must name its node (the proxy ID)")
	}
	allocID := who.allocID
	inst, ok := s.allocProxy(who, node)
	if !ok || inst.Proxy == nil {
		return grant{}, fmt.Errorf("node %q is not a connect proxy registered in the catalog on this node", node)
	}
	if inst.AllocID != allocID {
		return grant{}, fmt.Errorf("node %q does not belong to allocation %s", node, allocID)
	}
	dest := inst.Proxy.DestinationServiceName
	if err := s.checkServiceToken(token, dest, node); err != nil {
		return grant{}, err
	}
	return proxyGrant(node, inst), nil
}

// checkServiceToken: with ACLs, token must have service:write on dest.
func (s *Server) checkServiceToken(token, dest, node string) error {
	if s.cfg.ACL == nil {
		return nil
	}
	authz, err := s.resolveToken(token)
	if err != nil {
		return err
	}
	if !authz.AllowServiceWrite(dest) {
		return fmt.Errorf("%w: the token has no service:write on %q (proxy %q)", acl.ErrPermissionDenied, dest, node)
	}
	return nil
}

// resolveToken resolves a stream's token (ACLs enabled).
func (s *Server) resolveToken(token string) (*acl.ACL, error) {
	ctx, cancel := context.WithTimeout(s.ctx, aclResolveTimeout)
	defer cancel()
	authz, _, err := s.cfg.ACL.Resolve(ctx, token)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tokenMetadata, err)
	}
	return authz, nil
}

// authorize checks one request of stream k: node is the request's node ID
// ("" when omitted), secrets the secret names it subscribes to (nil for
// other types). The stream's grant is decided on its first request that
// names a node; a denial ends the stream with PermissionDenied.
func (t *tracker) authorize(k streamKey, node string, secrets []string) error {
	t.mu.Lock()
	st := t.streams[k]
	var who peerInfo
	var g *grant
	var token string
	if st != nil {
		who, g, token = st.peer, st.grant, st.token
	}
	t.mu.Unlock()
	if st == nil {
		return status.Error(codes.Internal, "xDS stream is not tracked")
	}
	if g == nil || (node != "" && node != g.node && !g.anyNode) {
		if g != nil {
			return t.deny(who, node, fmt.Errorf("stream is bound to node %q and cannot switch to %q", g.node, node))
		}
		ng, err := t.grantFor(who, token, node)
		if err != nil {
			return t.deny(who, node, err)
		}
		t.mu.Lock()
		st.grant = &ng
		t.mu.Unlock()
		g = &ng
	}
	for _, name := range secrets {
		if !g.allowsSecret(name) && !t.s.linkedLeaf(g, name) {
			return t.deny(who, g.node, fmt.Errorf("secret %q is not this proxy's (it may have %q and %q)", name, g.leaf, RootsSecret))
		}
	}
	return nil
}

func (t *tracker) grantFor(who peerInfo, token, node string) (grant, error) {
	switch who.kind {
	case peerHost:
		return t.s.hostGrant(token, node)
	case peerAlloc:
		return t.s.allocGrant(who, token, node)
	default:
		return grant{}, errors.New("connection did not come through a meshlet listener")
	}
}

// deny logs a refused request and returns the stream's gRPC error.
func (t *tracker) deny(who peerInfo, node string, err error) error {
	t.s.m.denied.Inc()
	t.s.log.Warn("xDS request denied", "alloc_id", who.allocID, "proxy_id", node, "error", err)
	if who.allocID != "" {
		return status.Errorf(codes.PermissionDenied, "allocation %s: %v", who.allocID, err)
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

type peerKind int

const (
	peerUnknown peerKind = iota
	peerHost
	peerAlloc
)

// peerInfo is the gRPC AuthInfo of every connection to the server: which
// kind of listener accepted it and, for an allocation's socket, which
// allocation. It is set by the server's transport credentials, from the
// connection's type, and cannot be influenced by the client.
type peerInfo struct {
	credentials.CommonAuthInfo
	kind    peerKind
	allocID string
	sock    *allocListener // the allocation's socket (peerAlloc)
}

// AuthType implements credentials.AuthInfo.
func (peerInfo) AuthType() string { return "meshlet-local" }

// tokenOf is the ACL token secret a stream sent in its metadata ("" when
// none).
func tokenOf(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(tokenMetadata); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func peerOf(ctx context.Context) peerInfo {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(peerInfo); ok {
			return info
		}
	}
	return peerInfo{}
}

// listenerCreds are the server's transport credentials: no security on the
// wire (plain gRPC over loopback or a unix socket, like insecure
// credentials), but each connection is labelled with the listener that
// accepted it. One gRPC server serves every listener, so the label comes
// from the connection's type (allocConn), not from per-listener options.
type listenerCreds struct{}

var errClientHandshake = errors.New("meshlet listener credentials are server-side only")

func (listenerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errClientHandshake
}

func (listenerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := peerInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, kind: peerHost}
	if ac, ok := c.(*allocConn); ok {
		info.kind, info.allocID, info.sock = peerAlloc, ac.allocID, ac.l
	}
	return c, info, nil
}

func (listenerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (c listenerCreds) Clone() credentials.TransportCredentials { return c }

func (listenerCreds) OverrideServerName(string) error { return nil }

// allocListener accepts connections on one allocation's socket and labels
// them with its allocation ID. Closing it also closes every connection it
// accepted, so a stopped allocation keeps no stream.
type allocListener struct {
	net.Listener
	allocID string
	// netns, when set, is the only network namespace connections may
	// come from (WithPeerNetNS).
	netns  *nsIdentity
	onDeny func(error)
	// proxies are the proxies the allocation runs (WithAllocProxies);
	// fixed once the listener is made.
	proxies []catalog.ServiceInstance
	onClose func()

	mu     sync.Mutex
	conns  map[*allocConn]struct{}
	closed bool
}

type allocConn struct {
	net.Conn
	allocID string
	l       *allocListener
	once    sync.Once
}

func (l *allocListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.netns != nil {
			if err := checkPeerNetNS(c, *l.netns); err != nil {
				_ = c.Close()
				if l.onDeny != nil {
					l.onDeny(err)
				}
				continue
			}
		}
		return l.track(c)
	}
}

func (l *allocListener) track(c net.Conn) (net.Conn, error) {
	ac := &allocConn{Conn: c, allocID: l.allocID, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[ac] = struct{}{}
	return ac, nil
}

func (l *allocListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	wasClosed := l.closed
	l.closed = true
	conns := l.conns
	l.conns = map[*allocConn]struct{}{}
	l.mu.Unlock()
	if !wasClosed && l.onClose != nil {
		l.onClose()
	}
	for c := range conns {
		_ = c.Close()
	}
	return err
}

func (c *allocConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// ListenAlloc listens on an allocation's unix socket at path: it creates the
// parent directory, replaces a stale socket (but never another kind of
// file) and makes the socket connectable by any user (0666), as sidecars may
// run as any user. Every stream accepted on it is bound to allocID (see
// "Node identity and authorization" in the package doc). Closing the
// listener closes the connections it accepted.
func (s *Server) ListenAlloc(allocID, path string, opts ...AllocOption) (net.Listener, error) {
	if allocID == "" {
		return nil, fmt.Errorf("failed to listen on %s: %w", path, ErrNoAllocID)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("failed to create socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("failed to listen on %s: %w", path, ErrNotSocket)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("failed to remove stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("failed to set socket permissions: %w", err)
	}
	al := &allocListener{Listener: l, allocID: allocID, conns: map[*allocConn]struct{}{},
		onDeny: func(err error) {
			s.log.Warn("refused a connection to an allocation socket", "alloc_id", allocID, "error", err)
		}}
	for _, o := range opts {
		if err := o(al); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	s.declared.add(al)
	al.onClose = func() { s.declared.remove(al) }
	return al, nil
}

// ErrNoAllocID: an allocation socket needs the allocation's ID.
var ErrNoAllocID = errors.New("allocation ID is required")
