package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// ACL enforcement. With WithACL every request's token (X-Nomad-Token, or
// Authorization: Bearer) is resolved and checked against the rule of the
// route it reaches (acl_rules.go) before its handler runs; the /v1/acl
// endpoints (acl_endpoints.go) manage tokens and policies. Without it
// nothing is enforced and the /v1/acl endpoints answer 400 "ACL support
// disabled", as Nomad does. Secrets are never logged.

// ACLResolver turns a request's secret into its ACL and token. An empty
// secret is the anonymous token (its ACL is the anonymous policy's; the
// token may be nil). A secret naming no token, or an expired one, is an
// error wrapping acl.ErrTokenNotFound.
type ACLResolver interface {
	Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error)
}

// WithACL enables ACLs: res resolves request tokens and store holds the
// tokens and policies the /v1/acl endpoints manage. A nil res leaves ACLs
// disabled; a nil store (a client-only agent, which forwards the /v1/acl
// routes to its servers) enforces tokens and answers those routes with
// errNoACLStore.
func WithACL(res ACLResolver, store acl.Store) ServerOption {
	return func(s *Server) {
		if res == nil {
			return
		}
		s.aclRes, s.aclStore = res, store
		if s.authzOf == nil {
			s.authzOf = func(a *acl.ACL, _ *acl.Token) authorizer { return a }
		}
	}
}

// errNoACLStore: this server enforces tokens but keeps no ACL state.
var errNoACLStore = fmt.Errorf("%w: ACL tokens and policies are served by the servers", errBadRequest)

// aclEnabled reports whether WithACL was given.
func (s *Server) aclEnabled() bool { return s.aclRes != nil }

// identity is the resolved caller of a request.
type identity struct {
	authz authorizer
	// token is nil for the anonymous token.
	token *acl.Token
}

type identityKey struct{}

// identityFrom returns the caller enforcement resolved (false when ACLs
// are disabled or the route is open).
func identityFrom(ctx context.Context) (identity, bool) {
	id, ok := ctx.Value(identityKey{}).(identity)
	return id, ok
}

// requestSecret is the request's token secret: X-Nomad-Token, else an
// "Authorization: Bearer" header; "" is the anonymous token.
func requestSecret(r *http.Request) string {
	if tok := strings.TrimSpace(r.Header.Get("X-Nomad-Token")); tok != "" {
		return tok
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok)
	}
	return ""
}

// enforce checks each request against its route's rule before mux serves
// it; requests matching no route go to mux unchecked (404 or 405).
func (s *Server) enforce(mux *http.ServeMux) http.Handler {
	if !s.aclEnabled() {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		rl := ruleFor(pattern)
		if pattern == "" || rl.open {
			mux.ServeHTTP(w, r)
			return
		}
		id, err := s.resolve(r)
		if err == nil && rl.allow != nil && !rl.allow(id.authz, r) {
			err = acl.ErrPermissionDenied
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// resolve resolves the request's token.
func (s *Server) resolve(r *http.Request) (identity, error) {
	a, tok, err := s.aclRes.Resolve(r.Context(), requestSecret(r))
	if err != nil {
		if errors.Is(err, acl.ErrTokenNotFound) {
			return identity{}, acl.ErrTokenNotFound
		}
		return identity{}, fmt.Errorf("failed to resolve ACL token: %w", err)
	}
	return identity{authz: s.authzOf(a, tok), token: tok}, nil
}

// authorizeJob checks, on top of the route's submit-job rule, that the
// caller may submit in the job's own namespace and may register each
// service the job declares (service write): a job may only register a
// service name its submitter's token may write. A connect sidecar is
// registered under its parent service's name, which covers it. A job with
// an ingress gateway also needs mesh write (its config entry).
func (s *Server) authorizeJob(r *http.Request, job *structs.Job) error {
	if !s.aclEnabled() {
		return nil
	}
	id, ok := identityFrom(r.Context())
	if !ok {
		return acl.ErrPermissionDenied // enforcement did not run: fail closed
	}
	if job.Namespace != "" && !id.authz.AllowNamespaceOperation(job.Namespace, acl.NamespaceCapabilitySubmitJob) {
		return acl.ErrPermissionDenied
	}
	for _, name := range jobServiceNames(job) {
		if !id.authz.AllowServiceWrite(name) {
			return fmt.Errorf("%w: job registers service %q without service write permission", acl.ErrPermissionDenied, name)
		}
	}
	if kind, name := jobGateway(job); name != "" && !id.authz.AllowMeshWrite() {
		return fmt.Errorf("%w: job writes the %s-gateway config entry %q without mesh write permission", acl.ErrPermissionDenied, kind, name)
	}
	return nil
}

// jobGateway names the job's first ingress or terminating gateway service
// and its kind ("" when none): registering it writes its config entry,
// which takes mesh write (Consul's operator write), as writing the entry
// through the API does. A mesh gateway writes no entry: service write on
// it is enough, as in Consul.
func jobGateway(job *structs.Job) (kind, name string) {
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for _, s := range tg.Services {
			if s != nil && (s.Connect.IsIngress() || s.Connect.IsTerminating()) {
				return s.Connect.Gateway.Kinds()[0], s.Name
			}
		}
	}
	return "", ""
}

// isolatedDrivers run tasks in their own filesystem and process space;
// exec into a task of any other driver (raw_exec, connect_proxy, whose
// sidecar drops privileges but whose exec sessions do not, or a plugin
// meshlet cannot vouch for) is a shell on the node.
var isolatedDrivers = map[string]bool{"exec": true, "docker": true, "podman": true}

// authorizeExec checks an exec into task of alloc against the
// allocation's own namespace: alloc-exec, and alloc-node-exec too when
// the task's driver does not isolate it (Nomad's rule).
func (s *Server) authorizeExec(r *http.Request, alloc *structs.Allocation, task string) error {
	if !s.aclEnabled() {
		return nil
	}
	id, ok := identityFrom(r.Context())
	if !ok {
		return acl.ErrPermissionDenied // enforcement did not run: fail closed
	}
	return execAllowed(id.authz, alloc, task)
}

// execAllowed is authorizeExec's check of the caller's authorizer a.
func execAllowed(a authorizer, alloc *structs.Allocation, task string) error {
	ns := alloc.Namespace
	if ns == "" {
		ns = defaultNamespace
	}
	if !a.AllowNamespaceOperation(ns, acl.NamespaceCapabilityAllocExec) {
		return acl.ErrPermissionDenied
	}
	var driver string
	if tg := allocGroup(alloc); tg != nil {
		if t := tg.LookupTask(task); t != nil {
			driver = t.Driver
		}
	}
	if !isolatedDrivers[driver] && !a.AllowNamespaceOperation(ns, acl.NamespaceCapabilityAllocNodeExec) {
		return fmt.Errorf("%w: exec into a %q task needs alloc-node-exec", acl.ErrPermissionDenied, driver)
	}
	return nil
}

// jobServiceNames are the names the job's services will register under:
// defaults filled and connect names interpolated, as the servers
// canonicalize them, so that the check sees the names that register.
func jobServiceNames(job *structs.Job) []string { return jobspecs.ServiceNames(job) }

// aclStatus maps the acl package's sentinels to HTTP statuses (0: not an
// ACL error).
func aclStatus(err error) int {
	switch {
	case errors.Is(err, acl.ErrTokenNotFound), errors.Is(err, acl.ErrPermissionDenied):
		return http.StatusForbidden
	case errors.Is(err, acl.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, acl.ErrInvalid), errors.Is(err, acl.ErrBootstrapDone), errors.Is(err, acl.ErrDisabled):
		return http.StatusBadRequest
	}
	return 0
}
