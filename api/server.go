package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/jobspecs"
)

const (
	// maxBodyBytes bounds request bodies (jobspecs are small).
	maxBodyBytes = 16 << 20
	// defaultWait and maxWait bound blocking queries, as in Nomad.
	defaultWait = 5 * time.Minute
	maxWait     = 10 * time.Minute
	// MaxIDLength bounds job IDs, names and namespaces, and every ID in a
	// request path, in bytes: the jobspec's name limit, so that the API
	// and the server's validation agree.
	MaxIDLength = jobspecs.MaxNameBytes
)

// errBadRequest marks malformed requests (bad JSON, bad parameters); it maps
// to 400 like ErrInvalid.
var errBadRequest = errors.New("bad request")

// AgentInfo describes the agent in /v1/agent/self and /v1/status/leader.
type AgentInfo struct {
	NodeName   string
	Region     string
	Datacenter string
	Version    string
	// RPCAddr is reported as the leader address ("127.0.0.1:4647").
	RPCAddr string
}

// Server serves the /v1 HTTP API over a Backend.
type Server struct {
	b       Backend
	logger  hclog.Logger
	metrics http.Handler
	info    AgentInfo
	evals   *evalMemo
	handler http.Handler
	// aclRes and aclStore are set by WithACL (nil: ACLs disabled);
	// authzOf turns a resolved ACL into what enforcement asks (a seam
	// for tests).
	aclRes   ACLResolver
	aclStore acl.Store
	authzOf  func(*acl.ACL, *acl.Token) authorizer
	// aclRecheck is how often a long-lived request's token is resolved
	// again (WithACLRecheck).
	aclRecheck time.Duration
	// done ends long-lived requests when the server closes.
	done  context.Context
	close context.CancelFunc
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithMetricsHandler serves h (for example promhttp.Handler()) at
// /v1/metrics. Without it /v1/metrics answers 404.
func WithMetricsHandler(h http.Handler) ServerOption {
	return func(s *Server) { s.metrics = h }
}

// WithAgentInfo sets what /v1/agent/self and /v1/status/leader report.
// Empty fields keep their defaults.
func WithAgentInfo(info AgentInfo) ServerOption {
	return func(s *Server) {
		if info.NodeName != "" {
			s.info.NodeName = info.NodeName
		}
		if info.Region != "" {
			s.info.Region = info.Region
		}
		if info.Datacenter != "" {
			s.info.Datacenter = info.Datacenter
		}
		if info.Version != "" {
			s.info.Version = info.Version
		}
		if info.RPCAddr != "" {
			s.info.RPCAddr = info.RPCAddr
		}
	}
}

// NewServer returns a Server over b. A nil logger discards logs.
func NewServer(b Backend, logger hclog.Logger, opts ...ServerOption) *Server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Server{
		b:      b,
		logger: logger.Named("http"),
		info: AgentInfo{
			NodeName:   "meshlet",
			Region:     "global",
			Datacenter: "dc1",
			Version:    "0.1.0",
			RPCAddr:    "127.0.0.1:4647",
		},
		evals: newEvalMemo(evalMemoSize),
	}
	for _, o := range opts {
		o(s)
	}
	s.done, s.close = context.WithCancel(context.Background())
	s.handler = s.recoverer(limitPath(oneNamespace(httpsrv.FilterLists(s.enforce(s.routes())))))
	return s
}

// Handler returns the HTTP handler serving every /v1 route.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends the long-lived requests in flight and to come (blocking
// queries return, log follows and exec sessions end) so that
// http.Server.Shutdown does not wait for them. Call it before Shutdown.
func (s *Server) Close() { s.close() }

// requestContext is r's context, also cancelled by Close.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.done, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	s.jobRoutes(mux)
	s.allocRoutes(mux)
	s.evalRoutes(mux)
	s.nodeRoutes(mux)
	s.agentRoutes(mux)
	s.operatorRoutes(mux)
	s.aclRoutes(mux)
	mux.HandleFunc("GET /v1/client/fs/logs/{alloc}", s.handleLogs)
	mux.HandleFunc("GET /v1/client/allocation/{alloc}/exec", s.handleExec)
	mux.HandleFunc("GET /v1/client/allocation/{alloc}/checks", s.handleChecks)
	return mux
}

// recoverer turns a handler panic into a 500 with a one-line body; the
// stack goes to the log, never to the client.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.Error("handler panicked", "method", r.Method, "path", r.URL.Path,
					"error", fmt.Sprint(v), "stack", string(debug.Stack()))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// limitPath answers 400 to a request whose path has a segment (an ID)
// longer than MaxIDLength, before any lookup.
func limitPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for seg := range strings.SplitSeq(r.URL.Path, "/") {
			if len(seg) > MaxIDLength {
				http.Error(w, fmt.Sprintf("request path segment is %d bytes long, at most %d are allowed", len(seg), MaxIDLength), http.StatusBadRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// oneNamespace refuses a request for a namespace other than "default"
// (or "*", all of them): meshlet has one, and every object is in it. The
// ACL rules check the request's namespace, so a token with rights in
// another namespace must not reach "default"'s objects through it.
func oneNamespace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ns := r.URL.Query().Get("namespace"); ns != "" && ns != defaultNamespace && ns != "*" {
			http.Error(w, errNoNamespace(ns).Error(), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errNoNamespace is the answer for a namespace other than "default".
func errNoNamespace(ns string) error {
	return fmt.Errorf("%w: nonexistent namespace %q: meshlet has one namespace, %q", ErrInvalid, ns, defaultNamespace)
}

// readFunc produces a read endpoint's response body.
type readFunc func(r *http.Request) (any, error)

// read wraps a GET endpoint: it honours blocking queries (?index=&wait=) and
// sets X-Nomad-Index to the index observed before reading, so that a client
// never skips a change.
func (s *Server) read(fn readFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		idx, err := s.block(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		out, err := fn(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		setQueryMeta(w, idx)
		s.writeJSON(w, r, out)
	}
}

// writeFunc performs a write and returns the response body and the index
// the write produced (0: use the backend's current index).
type writeFunc func(r *http.Request) (any, uint64, error)

func (s *Server) write(fn writeFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		out, idx, err := fn(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if idx == 0 {
			idx = s.b.Index()
		}
		setQueryMeta(w, idx)
		s.writeJSON(w, r, out)
	}
}

// block waits for a blocking query's index and returns the backend index to
// report.
func (s *Server) block(r *http.Request) (uint64, error) {
	q := r.URL.Query()
	raw := q.Get("index")
	if raw == "" {
		return s.b.Index(), nil
	}
	minIndex, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: invalid index %q", errBadRequest, raw)
	}
	wait, err := parseWait(q.Get("wait"))
	if err != nil {
		return 0, err
	}
	if cur := s.b.Index(); cur > minIndex {
		return cur, nil
	}
	rctx, rcancel := s.requestContext(r)
	defer rcancel()
	ctx, cancel := context.WithTimeout(rctx, wait)
	defer cancel()
	s.b.WaitIndex(ctx, minIndex)
	if err := r.Context().Err(); err != nil {
		return 0, err
	}
	return s.b.Index(), nil
}

// parseWait parses Nomad's wait parameter ("5s", "100ms"; a bare number is
// milliseconds), capped at maxWait.
func parseWait(raw string) (time.Duration, error) {
	if raw == "" {
		return defaultWait, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		ms, nerr := strconv.ParseUint(raw, 10, 32)
		if nerr != nil {
			return 0, fmt.Errorf("%w: invalid wait %q", errBadRequest, raw)
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 || d > maxWait {
		d = maxWait
	}
	return d, nil
}

func setQueryMeta(w http.ResponseWriter, idx uint64) {
	h := w.Header()
	h.Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
}

// writeJSON writes v as JSON (indented with ?pretty). A GET's ?filter=
// (httpsrv.FilterAnswer), then its ?per_page= and ?next_token=
// (paginate), apply here, to every JSON answer.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	v, err := httpsrv.FilterAnswer(r, v)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("%w: %w", ErrInvalid, err))
		return
	}
	if v, err = paginate(w, r, v); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if _, ok := r.URL.Query()["pretty"]; ok {
		enc.SetIndent("", "    ")
	}
	if err := enc.Encode(v); err != nil {
		s.logger.Debug("failed to write response", "path", r.URL.Path, "error", err)
	}
}

// statusFor maps an error to its HTTP status.
func statusFor(err error) int {
	if code := aclStatus(err); code != 0 {
		return code
	}
	var maxErr *http.MaxBytesError
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrAmbiguousPrefix), errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.As(err, &maxErr):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, syscall.ENOSPC):
		// A full disk: nothing was stored (writes are all-or-nothing).
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// writeError answers with a one-line plain-text message, as Nomad does.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusFor(err)
	msg := oneLine(err.Error())
	if code >= 500 {
		if r.Context().Err() != nil {
			return // the client went away; nobody reads the answer
		}
		s.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	http.Error(w, msg, code)
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// decodeBody decodes exactly one JSON value from the request body into v;
// any failure but an oversized body (413) is a 400.
func decodeBody(r *http.Request, v any) error {
	if err := httpsrv.DecodeJSON(r.Body, v); err != nil {
		if errors.Is(err, httpsrv.ErrBadBody) {
			return fmt.Errorf("%w: %w", errBadRequest, err)
		}
		return err
	}
	return nil
}

// queryBool parses a boolean query parameter; absent means def.
func queryBool(r *http.Request, name string, def bool) (bool, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		return false, fmt.Errorf("%w: invalid %s %q", errBadRequest, name, raw)
	}
	return v, nil
}
