package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/structs"
)

// Backend is what a server agent exposes to client nodes; server.Server
// implements it.
type Backend interface {
	// RegisterNode stores the node, including its SecretID.
	RegisterNode(ctx context.Context, node *structs.Node) error
	// NodeAllocs blocks until the state index passes minIndex or ctx ends,
	// then returns the node's allocations and the index they reflect.
	NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error)
	// AllocsOnNode returns the node's allocations now, for the servers'
	// own checks: unlike NodeAllocs it is not the node's fetch (the
	// server remembers what each node's fetch answered).
	AllocsOnNode(ctx context.Context, nodeID string) ([]*structs.Allocation, error)
	UpdateAllocs(ctx context.Context, updates []*structs.Allocation) error
	Heartbeat(ctx context.Context, nodeID string) (ttl time.Duration, err error)
	// Node returns the stored node; an unknown node is (nil, nil) or an
	// error wrapping structs.ErrUnknownNode.
	Node(ctx context.Context, id string) (*structs.Node, error)
	// Alloc returns the stored allocation; an unknown one is (nil, nil).
	Alloc(ctx context.Context, id string) (*structs.Allocation, error)
	// Leader reports whether this server takes writes and, if not, the
	// RPC address (host:port) of the leader ("" while there is none).
	Leader() (isLeader bool, leaderRPCAddr string)
}

// Errors a Backend returns are answered as: structs.ErrUnknownNode 404
// (the client registers again), ErrNoLeader 503, ErrForbidden 403,
// ErrBadRequest 400; a failed write on a server that is no longer the
// leader 503; anything else 500 (the client tries another server).

// ServerConfig configures a Server.
type ServerConfig struct {
	Backend Backend
	// TLS is the listener's configuration (certificate and client CA);
	// a verified client certificate is required of every peer. nil serves
	// plaintext HTTP: insecure, logged as a warning.
	TLS *tls.Config
	// DialTLS is used to forward writes to the leader (the server's own
	// certificate: servers may authenticate as TLS clients). Required
	// with TLS.
	DialTLS *tls.Config
	Logger  hclog.Logger
	// MaxBlockingWait caps one NodeAllocs long-poll (default 5 minutes).
	MaxBlockingWait time.Duration
	// API, when set, serves the agent's /v1 HTTP API on the RPC port to
	// authenticated agents (client agents forward their users' requests).
	API http.Handler
	// Join, when set, adds a joining server's etcd member (server
	// certificates only).
	Join Joiner
	// Connect, when set, serves the mesh calls of client agents (the mesh
	// feed, registrations, CSR signing, intentions); without it they are
	// answered 404.
	Connect ConnectBackend
	// ACL, when set, resolves tokens and policies for client agents
	// (acl.go); without it those calls answer acl.ErrDisabled.
	ACL acl.Reader
	// WorkloadTokens, when set, mints the service identity tokens of
	// connect sidecars for client agents (acl_workload.go); without it
	// that call answers acl.ErrDisabled.
	WorkloadTokens WorkloadTokenMinter
	// Tokens, when set (ACLs enabled), judges the intention, config entry
	// and CA rotation writes client agents make for their callers with
	// the callers' tokens (acl_writes.go); without it node credentials
	// suffice.
	Tokens TokenResolver
}

// closeGrace bounds how long Close waits for calls in flight.
const closeGrace = 5 * time.Second

// Server serves the RPC port.
type Server struct {
	cfg    ServerConfig
	logger hclog.Logger
	tls    *tls.Config
	http   *httpsrv.Server
	fwd    *Forwarder
	// ctx ends at Close, ending blocking calls.
	ctx    context.Context
	cancel context.CancelFunc

	warnOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	// regLocks serializes registrations of one node ID (by hash).
	regLocks [32]sync.Mutex
	// feedKeepalive is the mesh feed's keepalive interval (0:
	// ConnectKeepalive); tests shorten it before Serve.
	feedKeepalive time.Duration
}

// NewServer checks cfg and builds a Server; nothing listens until Serve.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("failed to create RPC server: no backend")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxBlockingWait <= 0 {
		cfg.MaxBlockingWait = DefaultMaxBlockingWait
	}
	if cfg.TLS != nil && cfg.DialTLS == nil {
		return nil, errors.New("failed to create RPC server: TLS is configured but DialTLS (to forward writes to the leader) is not")
	}
	srvTLS, err := serverTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.Named("rpc")
	fwd, err := NewForwarder(cfg.DialTLS, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, logger: logger, tls: srvTLS, fwd: fwd, ctx: ctx, cancel: cancel}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathRegister, s.leaderOnly(s.handleRegister))
	mux.HandleFunc("GET "+pathAllocs, s.handleAllocs)
	mux.HandleFunc("POST "+pathUpdate, s.leaderOnly(s.handleUpdate))
	mux.HandleFunc("POST "+pathHeartbeat, s.leaderOnly(s.handleHeartbeat))
	mux.HandleFunc("POST "+pathJoin, s.handleJoin)
	s.connectRoutes(mux)
	s.aclRoutes(mux)
	mux.HandleFunc("/v1/", s.apiHandler)
	s.http = httpsrv.New(s.guard(mux))
	// TLS handshake failures (a foreign CA, no certificate) land here.
	s.http.HTTP().ErrorLog = logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Info})
	return s, nil
}

// Serve serves the RPC protocol on ln (wrapped in TLS when configured)
// until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if s.tls == nil {
		s.warnOnce.Do(func() {
			s.logger.Warn("RPC port serves plaintext without authentication: anyone who can reach it can act as a client node; configure TLS", "address", ln.Addr().String())
		})
	} else {
		ln = tls.NewListener(ln, s.tls)
	}
	s.logger.Info("serving RPC", "address", ln.Addr().String(), "tls", s.tls != nil)
	if err := s.http.Serve(ln); err != nil {
		return fmt.Errorf("failed to serve RPC on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Close ends pending long-polls (answered "shutting down", so clients move
// to another server), stops the listeners and waits a few seconds for
// calls in flight. It may be called more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.closeErr = s.http.Stop(closeGrace)
		s.fwd.Close()
	})
	return s.closeErr
}

// guard checks the peer's certificate role, bounds the body and makes the
// request's context end at Close.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role, err := peerRole(r)
		if err != nil {
			s.logger.Warn("refused RPC peer", "remote", r.RemoteAddr, "error", err)
			writeError(w, http.StatusForbidden, "", "client certificate names no usable role: %v", err)
			return
		}
		if r.TLS != nil && role != roleClient && role != roleServer {
			s.logger.Warn("refused RPC peer", "remote", r.RemoteAddr, "role", role)
			writeError(w, http.StatusForbidden, "", "a %q certificate may not use the RPC port", role)
			return
		}
		if r.Header.Get(HeaderForwarded) != "" && r.TLS != nil && role != roleServer {
			s.logger.Warn("refused forwarded call from a non-server peer", "remote", r.RemoteAddr, "role", role)
			writeError(w, http.StatusForbidden, "", "only a server may forward calls")
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// leaderOnly runs a write on the leader, forwards it from a follower to
// the leader, and answers 503 while there is no leader.
func (s *Server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		isLeader, addr := s.cfg.Backend.Leader()
		switch {
		case isLeader:
			h(w, r)
		case r.Header.Get(HeaderForwarded) != "":
			// Forwarded to us, but leadership moved: never forward twice.
			writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v: this server is not the leader (any more)", ErrNoLeader)
		case addr == "":
			writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v: election in progress", ErrNoLeader)
		default:
			s.fwd.Forward(w, r, addr)
		}
	}
}

// lockNode serializes registrations of one node ID, so that two first
// registrations with different secrets cannot both succeed.
func (s *Server) lockNode(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	mu := &s.regLocks[h.Sum32()%uint32(len(s.regLocks))]
	mu.Lock()
	return mu.Unlock
}

// backendError answers a Backend's error.
func (s *Server) backendError(w http.ResponseWriter, r *http.Request, write bool, err error) {
	switch {
	case s.ctx.Err() != nil:
		writeError(w, http.StatusServiceUnavailable, codeShutdown, "server is shutting down")
	case r.Context().Err() != nil:
		// The caller left; nobody reads the answer, but never answer 200.
		writeError(w, http.StatusServiceUnavailable, codeShutdown, "call cancelled")
	case errors.Is(err, structs.ErrUnknownNode):
		writeError(w, http.StatusNotFound, codeUnknownNode, "%v", err)
	case errors.Is(err, ErrNoLeader):
		writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v", err)
	case errors.Is(err, ErrForbidden):
		writeError(w, http.StatusForbidden, "", "%v", err)
	case errors.Is(err, ErrBadRequest):
		writeError(w, http.StatusBadRequest, "", "%v", err)
	case errors.Is(err, catalog.ErrIDTaken):
		writeError(w, http.StatusConflict, codeIDTaken, "%v", err)
	case write && !s.isLeader():
		writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v: leadership lost during the call: %v", ErrNoLeader, err)
	default:
		s.logger.Error("RPC call failed", "path", r.URL.Path, "node_id", r.Header.Get(HeaderNodeID), "error", err)
		writeError(w, http.StatusInternalServerError, "", "%v", err)
	}
}

func (s *Server) isLeader() bool {
	ok, _ := s.cfg.Backend.Leader()
	return ok
}
