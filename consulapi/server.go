// Package consulapi serves the subset of Consul's HTTP API that connect
// tooling needs (catalog, health/connect, intentions, config entries, CA roots and leaves,
// CA configuration and root rotation, agent authorize), in the exact JSON
// shapes github.com/hashicorp/consul/api decodes. The agent serves it on
// 127.0.0.1:8500. It owns HTTP concerns
// only: routing, encoding, status codes, X-Consul-Index and blocking
// queries (?index=&wait=); state lives in catalog, ca and intention.
//
// Errors: bad JSON or an invalid intention is a 400 with a one-line
// message and changes nothing; unknown objects are 404; an existing
// intention on create is 409.
//
// Concurrency: a Server is safe for concurrent use; blocking queries
// subscribe to the store they watch for the duration of the request and
// end when the client leaves or Close is called. The stores are reached
// through small interfaces (Catalog, CA, Intentions, Authorizer).
package consulapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/httpsrv"
)

// Blocking query limits (Consul's). A query waits up to a
// jitterFraction of its wait longer, at random, so that watchers that
// started together do not all wake together.
const (
	defaultWait    = 5 * time.Minute
	maxWait        = 10 * time.Minute
	jitterFraction = 16
	maxBody        = 1 << 20
)

// Deps is what the API serves.
type Deps struct {
	Catalog    Catalog
	CA         CA
	Intentions Intentions
	Authz      Authorizer
	Datacenter string // default "dc1"
	NodeName   string // default "meshlet"
	// NodeAddress is the node's address in catalog and health answers
	// (default 127.0.0.1).
	NodeAddress string
	// RotateCA rotates the cluster's CA root (PUT
	// /v1/connect/ca/configuration; see ca_config.go): a server's CA, or a
	// call through a server on a client agent. nil: CA's own Rotate if it
	// has one.
	RotateCA func(ctx context.Context) error
	// ConfigEntries is the registry of config entries /v1/config reads
	// (nil: an empty one); ConfigWriter writes them (nil over a
	// *configentry.Registry: into it, in memory). See config.go.
	ConfigEntries ConfigEntries
	ConfigWriter  ConfigWriter
	// CatalogWriter stores the registrations of /v1/catalog/register
	// (see catalog_register.go); nil: into Catalog directly, when it is a
	// *catalog.Catalog (a lone control plane).
	CatalogWriter CatalogWriter
}

// Server is the Consul-shaped HTTP API.
type Server struct {
	d      Deps
	logger hclog.Logger
	mux    *http.ServeMux
	// done ends blocking queries when the server closes.
	done  context.Context
	close context.CancelFunc
	// aclRes is set by WithACL (nil: ACLs disabled); authzOf turns a
	// resolved ACL into what enforcement asks (a seam for tests).
	aclRes  ACLResolver
	authzOf func(*acl.ACL, *acl.Token) authorizer
	// randN returns a random number in [0, n), n > 0: the source of the
	// blocking queries' jitter (a seam for tests).
	randN func(n int64) int64
}

// NewServer builds the routes.
func NewServer(d Deps, logger hclog.Logger, opts ...Option) *Server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if d.Datacenter == "" {
		d.Datacenter = ca.DefaultDatacenter
	}
	if d.NodeName == "" {
		d.NodeName = "meshlet"
	}
	if d.NodeAddress == "" {
		d.NodeAddress = "127.0.0.1"
	}
	d = configDeps(d)
	s := &Server{d: d, logger: logger.Named("consulapi"), mux: http.NewServeMux(), randN: rand.Int64N}
	for _, o := range opts {
		o(s)
	}
	s.done, s.close = context.WithCancel(context.Background())
	s.routes()
	return s
}

// Handler returns the API's handler.
func (s *Server) Handler() http.Handler { return httpsrv.FilterLists(s.mux) }

// Close ends the blocking queries in flight and makes later ones answer at
// once, so that stopping the HTTP server does not wait for them. Call it
// before stopping the HTTP server.
func (s *Server) Close() { s.close() }

func (s *Server) routes() {
	h := map[string]http.HandlerFunc{
		"GET /v1/catalog/services":             s.catalogServices,
		"GET /v1/catalog/service/{name}":       s.catalogService,
		"GET /v1/health/service/{name}":        s.healthService,
		"GET /v1/health/connect/{name}":        s.healthConnect,
		"GET /v1/connect/intentions":           s.intentionList,
		"POST /v1/connect/intentions":          s.intentionCreate,
		"GET /v1/connect/intentions/exact":     s.intentionGetExact,
		"PUT /v1/connect/intentions/exact":     s.intentionPutExact,
		"DELETE /v1/connect/intentions/exact":  s.intentionDeleteExact,
		"GET /v1/connect/intentions/check":     s.intentionCheck,
		"GET /v1/connect/intentions/match":     s.intentionMatch,
		"GET /v1/connect/intentions/{id}":      s.intentionGetID,
		"PUT /v1/connect/intentions/{id}":      s.intentionUpdateID,
		"DELETE /v1/connect/intentions/{id}":   s.intentionDeleteID,
		"GET /v1/connect/ca/roots":             s.caRoots,
		"GET /v1/connect/ca/configuration":     s.caConfigGet,
		"PUT /v1/connect/ca/configuration":     s.caConfigSet,
		"GET /v1/agent/connect/ca/roots":       s.caRoots,
		"GET /v1/agent/connect/ca/leaf/{name}": s.caLeaf,
		"POST /v1/agent/connect/authorize":     s.authorize,
		"PUT /v1/agent/connect/authorize":      s.authorize,
		"GET /v1/acl/token/self":               s.aclTokenSelf,
	}
	s.configRoutes(h)
	h["PUT /v1/catalog/register"] = s.catalogRegister
	h["PUT /v1/catalog/deregister"] = s.catalogDeregister
	for pattern, fn := range h {
		s.mux.HandleFunc(pattern, s.guard(pattern, fn))
	}
}

// writeJSON answers 200 with v and the index headers.
// A list answer keeps what the request's ?filter= matches
// (httpsrv.FilterAnswer); a filter that does not apply answers 400.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, index uint64, v any) {
	v, err := httpsrv.FilterAnswer(r, v)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	s.writeAnswer(w, index, v)
}

// writeAnswer answers 200 with v, already filtered, as JSON.
func (s *Server) writeAnswer(w http.ResponseWriter, index uint64, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.logger.Error("failed to encode response", "error", err)
		http.Error(w, "failed to encode response", http.StatusInternalServerError)
		return
	}
	setIndex(w, index)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

func setIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set("X-Consul-Index", strconv.FormatUint(max(index, 1), 10))
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
}

// fail answers code with a one-line plain-text message.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if code >= 500 {
		s.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", msg)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

// failFor maps store errors to status codes.
func (s *Server) failFor(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, intention.ErrInvalid), errors.Is(err, errBadRequest),
		errors.Is(err, ca.ErrInvalidService), errors.Is(err, authz.ErrInvalidRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrCatalogWriteUnsupported):
		code = http.StatusNotImplemented
	case errors.Is(err, intention.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, intention.ErrExists), errors.Is(err, catalog.ErrIDTaken):
		code = http.StatusConflict
	case errors.Is(err, ca.ErrSignRefused), errors.Is(err, acl.ErrPermissionDenied), errors.Is(err, acl.ErrTokenNotFound):
		// The last two: the servers refused a client agent's forwarded
		// write with the caller's token.
		code = http.StatusForbidden
	case errors.Is(err, syscall.ENOSPC):
		// Nothing was stored; the operator must free space.
		code = http.StatusInsufficientStorage
	}
	s.fail(w, r, code, err)
}

var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// decodeBody decodes exactly one JSON value of at most maxBody bytes into v.
func decodeBody(r *http.Request, v any) error {
	if err := httpsrv.DecodeJSON(http.MaxBytesReader(nil, r.Body, maxBody), v); err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return nil
}

// block implements Consul's blocking queries: with ?index=N (N > 0) it
// waits until the index answered (current(), at least 1) moves off N (up,
// or back: see below), the wait passes (blockWait), the client goes away
// or the server closes. subscribe registers a change callback.
func (s *Server) block(r *http.Request, current func() uint64, subscribe func(func()) (cancel func())) error {
	q := r.URL.Query()
	raw := q.Get("index")
	if raw == "" {
		return nil
	}
	minIndex, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return badRequest("invalid index %q", raw)
	}
	wait, err := s.blockWait(q.Get("wait"))
	if err != nil {
		return err
	}
	// index=0 is no blocking query in Consul: the client has seen no
	// index yet (an empty store's own index may be 0). An index ahead of
	// the store's went backwards (this agent restarted: its catalog
	// counts from 0 again; a mirror was replaced by an older state):
	// answering at once lets the client see it and start over, as
	// Consul's clients do, instead of missing changes for the whole wait.
	reported := func() uint64 { return max(current(), 1) } // as setIndex
	if minIndex == 0 || reported() != minIndex {
		return nil
	}
	changed := make(chan struct{}, 1)
	cancel := subscribe(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for reported() == minIndex {
		select {
		case <-changed:
		case <-timer.C:
			return nil
		case <-r.Context().Done():
			return nil
		case <-s.done.Done():
			return nil
		}
	}
	return nil
}

// blockWait is a blocking query's wait: ?wait= (raw), at most 10m; absent,
// zero or negative, the default 5m (as Consul: wait=0 is no request to
// answer at once). A random jitter below a sixteenth of it is added, as
// Consul adds it, so that watchers do not wake together.
func (s *Server) blockWait(raw string) (time.Duration, error) {
	wait := defaultWait
	if raw != "" {
		w, err := time.ParseDuration(raw)
		if err != nil {
			return 0, badRequest("invalid wait %q", raw)
		}
		if w > 0 {
			wait = min(w, maxWait)
		}
	}
	if n := int64(wait / jitterFraction); n > 0 {
		wait += time.Duration(s.randN(n))
	}
	return wait, nil
}
