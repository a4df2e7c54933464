package consulapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
)

// ACL enforcement. With WithACL every route but the CA roots resolves the
// request's token (?token=, X-Consul-Token, or Authorization: Bearer) and
// checks the route's rule (acl_rules.go) before its handler runs; list
// answers are filtered to what the token may read (acl_views.go).
// Without it nothing is enforced. Secrets are never logged.

// ACLResolver turns a request's secret into its ACL and token. An empty
// secret is the anonymous token (the token may be nil). A secret naming
// no token, or an expired one, is an error wrapping acl.ErrTokenNotFound.
type ACLResolver interface {
	Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error)
}

// Option configures a Server.
type Option func(*Server)

// WithACL enables ACL enforcement with res (nil: disabled).
func WithACL(res ACLResolver) Option {
	return func(s *Server) {
		if res == nil {
			return
		}
		s.aclRes = res
		if s.authzOf == nil {
			s.authzOf = func(a *acl.ACL, _ *acl.Token) authorizer { return a }
		}
	}
}

// authorizer is what enforcement asks of a request's ACL: the method set
// of *acl.ACL the Consul routes need (a nil *acl.ACL allows all). It is
// an interface so that tests can grant finer permissions.
type authorizer interface {
	IsManagement() bool
	AllowOperatorRead() bool
	AllowOperatorWrite() bool
	AllowMeshRead() bool
	AllowMeshWrite() bool
	AllowServiceRead(name string) bool
	AllowServiceWrite(name string) bool
	AllowIntentionRead(dest string) bool
	AllowIntentionWrite(dest string) bool
	AllowNodeWrite() bool
}

var _ authorizer = (*acl.ACL)(nil)

// Consul's 403 bodies are "Permission denied" (acl.ErrPermissionDenied's
// message) and "ACL not found"; with ACLs disabled its ACL endpoints
// answer 401 "ACL support disabled" (acl.ErrDisabled's).
var errACLNotFound = errors.New("ACL not found")

// identity is a request's resolved caller.
type identity struct {
	authz authorizer
	token *acl.Token // nil: the anonymous token
}

type identityKey struct{}

// requestSecret is the request's token secret: ?token=, X-Consul-Token,
// else "Authorization: Bearer"; "" is the anonymous token.
func requestSecret(r *http.Request) string {
	if tok := r.URL.Query().Get("token"); tok != "" {
		return tok
	}
	if tok := strings.TrimSpace(r.Header.Get("X-Consul-Token")); tok != "" {
		return tok
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok)
	}
	return ""
}

// guard wraps the handler of pattern with its rule (management for a
// pattern without one); without ACLs it returns fn unchanged.
func (s *Server) guard(pattern string, fn http.HandlerFunc) http.HandlerFunc {
	if s.aclRes == nil {
		return fn
	}
	rl, ok := consulRules[pattern]
	if !ok {
		rl = ruleManagement
	}
	if rl.open {
		return fn
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := s.resolve(w, r)
		if !ok {
			return
		}
		if rl.allow != nil {
			allowed, err := rl.allow(s, id.authz, r)
			if err != nil {
				s.failFor(w, r, err)
				return
			}
			if !allowed {
				s.fail(w, r, http.StatusForbidden, acl.ErrPermissionDenied)
				return
			}
		}
		ctx := acl.ContextWithSecret(context.WithValue(r.Context(), identityKey{}, id), requestSecret(r))
		r = r.WithContext(ctx)
		if rl.view != nil {
			rl.view(s.scoped(id.authz), w, r)
			return
		}
		fn(w, r)
	}
}

// resolve resolves the request's token, answering 403 "ACL not found"
// (or 500) when it cannot.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) (identity, bool) {
	a, tok, err := s.aclRes.Resolve(r.Context(), requestSecret(r))
	switch {
	case errors.Is(err, acl.ErrTokenNotFound):
		s.fail(w, r, http.StatusForbidden, errACLNotFound)
		return identity{}, false
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, err)
		return identity{}, false
	}
	return identity{authz: s.authzOf(a, tok), token: tok}, true
}

// Consul's built-in management policy, which management tokens link.
const (
	globalManagementID   = "00000000-0000-0000-0000-000000000001"
	globalManagementName = "global-management"
)

// GET /v1/acl/token/self: the caller's token in consul/api's ACLToken
// shape, with the secret it sent.
func (s *Server) aclTokenSelf(w http.ResponseWriter, r *http.Request) {
	if s.aclRes == nil {
		s.fail(w, r, http.StatusUnauthorized, acl.ErrDisabled)
		return
	}
	id, _ := r.Context().Value(identityKey{}).(identity)
	t := id.token
	if t == nil {
		s.fail(w, r, http.StatusForbidden, errACLNotFound)
		return
	}
	out := &consul.ACLToken{
		CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex, AccessorID: t.AccessorID,
		SecretID: requestSecret(r), Description: t.Name, Local: !t.Global,
		CreateTime: t.CreateTime, ExpirationTime: t.ExpirationTime,
	}
	if t.Type == acl.TypeManagement {
		out.Policies = append(out.Policies, &consul.ACLTokenPolicyLink{ID: globalManagementID, Name: globalManagementName})
	}
	for _, p := range t.Policies {
		out.Policies = append(out.Policies, &consul.ACLTokenPolicyLink{Name: p})
	}
	s.writeJSON(w, r, t.ModifyIndex, out)
}
