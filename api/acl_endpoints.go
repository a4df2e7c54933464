package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/lazyre"
)

// The /v1/acl endpoints in Nomad's shapes (nomad/api's ACLTokens and
// ACLPolicies). What each requires is in nomadRules; the handlers check
// what depends on the caller (a token reading itself or its policies).
// Stored tokens carry no secret: a token's SecretID is answered only by
// its create (or bootstrap) and by /v1/acl/token/self, whose caller sent
// it.

// bootstrapTokenName is the name Nomad gives the bootstrap token.
const bootstrapTokenName = "Bootstrap Token"

// validPolicyName is Nomad's rule for policy names.
var validPolicyName = lazyre.New(`^[a-zA-Z0-9-]{1,128}$`)

func (s *Server) aclRoutes(mux *http.ServeMux) {
	for _, m := range []string{"PUT", "POST"} {
		mux.HandleFunc(m+" /v1/acl/bootstrap", s.aclWrite(s.aclBootstrap))
		mux.HandleFunc(m+" /v1/acl/policy/{name}", s.aclWrite(s.aclPolicyUpsert))
		mux.HandleFunc(m+" /v1/acl/token", s.aclWrite(s.aclTokenCreate))
		mux.HandleFunc(m+" /v1/acl/token/{accessor}", s.aclWrite(s.aclTokenUpdate))
	}
	mux.HandleFunc("GET /v1/acl/policies", s.aclRead(s.aclPolicyList))
	mux.HandleFunc("GET /v1/acl/policy/self", s.aclRead(s.aclPolicySelf))
	mux.HandleFunc("GET /v1/acl/policy/{name}", s.aclRead(s.aclPolicyGet))
	mux.HandleFunc("DELETE /v1/acl/policy/{name}", s.aclWrite(s.aclPolicyDelete))
	mux.HandleFunc("GET /v1/acl/tokens", s.aclRead(s.aclTokenList))
	mux.HandleFunc("GET /v1/acl/token/self", s.aclRead(s.aclTokenSelf))
	mux.HandleFunc("GET /v1/acl/token/{accessor}", s.aclRead(s.aclTokenGet))
	mux.HandleFunc("DELETE /v1/acl/token/{accessor}", s.aclWrite(s.aclTokenDelete))
}

// aclState is why the /v1/acl routes cannot be served here (nil: they
// can).
func (s *Server) aclState() error {
	switch {
	case !s.aclEnabled():
		return acl.ErrDisabled
	case s.aclStore == nil:
		return errNoACLStore
	}
	return nil
}

// aclReadFunc produces an ACL read's body and its index (0: the store's).
type aclReadFunc func(r *http.Request) (any, uint64, error)

// aclRead wraps an ACL read: 400 when ACLs are disabled, X-Nomad-Index
// from the ACL store.
func (s *Server) aclRead(fn aclReadFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.aclState(); err != nil {
			s.writeError(w, r, err)
			return
		}
		out, idx, err := fn(r)
		if err == nil && idx == 0 {
			idx, err = s.aclStore.Index(r.Context())
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		setQueryMeta(w, idx)
		s.writeJSON(w, r, out)
	}
}

// aclWrite wraps an ACL write; a nil body answers no content but the
// index, as Nomad's policy and delete endpoints do.
func (s *Server) aclWrite(fn writeFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.aclState(); err != nil {
			s.writeError(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		out, idx, err := fn(r)
		if err == nil && idx == 0 {
			idx, err = s.aclStore.Index(r.Context())
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		setQueryMeta(w, idx)
		if out != nil {
			s.writeJSON(w, r, out)
		}
	}
}

// caller is the request's resolved identity; the anonymous token has a
// nil token.
func caller(r *http.Request) identity {
	id, _ := identityFrom(r.Context())
	return id
}

// callerPolicies are the policy names the caller's token holds.
func callerPolicies(id identity) []string {
	if id.token == nil {
		return []string{acl.AnonymousPolicy}
	}
	return id.token.Policies
}

func (s *Server) aclBootstrap(r *http.Request) (any, uint64, error) {
	var req struct{ BootstrapSecret string }
	if err := decodeOptionalBody(r, &req); err != nil {
		return nil, 0, err
	}
	secret := req.BootstrapSecret
	if secret == "" {
		secret = acl.NewSecret()
	} else if _, err := uuid.Parse(secret); err != nil {
		return nil, 0, fmt.Errorf("%w: BootstrapSecret must be a UUID", acl.ErrInvalid)
	}
	tok, err := s.aclStore.Bootstrap(r.Context(), &acl.Token{
		AccessorID: uuid.NewString(),
		SecretHash: acl.HashSecret(secret),
		Name:       bootstrapTokenName,
		Type:       acl.TypeManagement,
		Global:     true,
		CreateTime: time.Now().UTC(),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("failed to bootstrap ACLs: %w", err)
	}
	s.logger.Info("ACL bootstrap token created", "accessor_id", tok.AccessorID)
	return tokenOut(tok, secret), tok.ModifyIndex, nil
}

// decodeOptionalBody decodes the body into v unless it is empty.
func decodeOptionalBody(r *http.Request, v any) error {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("failed to read request body: %w", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	return decodeBody(r, v)
}

func (s *Server) aclPolicyList(r *http.Request) (any, uint64, error) {
	policies, idx, err := s.aclStore.ListPolicies(r.Context())
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list ACL policies: %w", err)
	}
	id := caller(r)
	held := callerPolicies(id)
	out := []*nomadapi.ACLPolicyListStub{}
	for _, p := range policies {
		if id.authz.IsManagement() || slices.Contains(held, p.Name) {
			out = append(out, &nomadapi.ACLPolicyListStub{Name: p.Name, Description: p.Description,
				CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
		}
	}
	return out, idx, nil
}

// aclPolicySelf lists the policies of the caller's token.
func (s *Server) aclPolicySelf(r *http.Request) (any, uint64, error) {
	policies, err := s.aclStore.Policies(r.Context(), callerPolicies(caller(r)))
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read ACL policies: %w", err)
	}
	out := []*nomadapi.ACLPolicyListStub{}
	for _, p := range policies {
		out = append(out, &nomadapi.ACLPolicyListStub{Name: p.Name, Description: p.Description,
			CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
	}
	return out, 0, nil
}

// aclPolicyGet reads a policy: a management token reads any, others the
// policies their token holds.
func (s *Server) aclPolicyGet(r *http.Request) (any, uint64, error) {
	name := r.PathValue("name")
	id := caller(r)
	if !id.authz.IsManagement() && !slices.Contains(callerPolicies(id), name) {
		return nil, 0, acl.ErrPermissionDenied
	}
	p, err := s.aclStore.Policy(r.Context(), name)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read ACL policy %q: %w", name, err)
	}
	return &nomadapi.ACLPolicy{Name: p.Name, Description: p.Description, Rules: p.Rules,
		CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}, p.ModifyIndex, nil
}

func (s *Server) aclPolicyUpsert(r *http.Request) (any, uint64, error) {
	var req nomadapi.ACLPolicy
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	name := r.PathValue("name")
	switch {
	case req.Name != "" && req.Name != name:
		return nil, 0, fmt.Errorf("%w: policy name %q does not match request path %q", acl.ErrInvalid, req.Name, name)
	case !validPolicyName.MatchString(name):
		return nil, 0, fmt.Errorf("%w: invalid policy name %q", acl.ErrInvalid, name)
	case req.JobACL != nil:
		return nil, 0, fmt.Errorf("%w: workload-associated policies (JobACL) are not supported", acl.ErrInvalid)
	}
	p, err := s.aclStore.UpsertPolicy(r.Context(), &acl.Policy{Name: name, Description: req.Description, Rules: req.Rules})
	if err != nil {
		return nil, 0, fmt.Errorf("failed to write ACL policy %q: %w", name, err)
	}
	s.logger.Info("ACL policy written", "policy", name)
	return nil, p.ModifyIndex, nil
}

func (s *Server) aclPolicyDelete(r *http.Request) (any, uint64, error) {
	name := r.PathValue("name")
	if err := s.aclStore.DeletePolicy(r.Context(), name); err != nil {
		return nil, 0, fmt.Errorf("failed to delete ACL policy %q: %w", name, err)
	}
	s.logger.Info("ACL policy deleted", "policy", name)
	return nil, 0, nil
}

func (s *Server) aclTokenList(r *http.Request) (any, uint64, error) {
	tokens, idx, err := s.aclStore.ListTokens(r.Context())
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list ACL tokens: %w", err)
	}
	out := make([]*nomadapi.ACLTokenListStub, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, &nomadapi.ACLTokenListStub{AccessorID: t.AccessorID, Name: t.Name, Type: t.Type,
			Policies: nonNilStrings(t.Policies), Global: t.Global, CreateTime: t.CreateTime,
			ExpirationTime: t.ExpirationTime, CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex})
	}
	return out, idx, nil
}

func (s *Server) aclTokenGet(r *http.Request) (any, uint64, error) {
	t, err := s.aclStore.Token(r.Context(), r.PathValue("accessor"))
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read ACL token: %w", err)
	}
	return tokenOut(t, ""), t.ModifyIndex, nil
}

// aclTokenSelf answers the caller's own token, with the secret it sent.
func (s *Server) aclTokenSelf(r *http.Request) (any, uint64, error) {
	id := caller(r)
	if id.token == nil {
		return nil, 0, acl.ErrTokenNotFound
	}
	return tokenOut(id.token, requestSecret(r)), id.token.ModifyIndex, nil
}

func (s *Server) aclTokenDelete(r *http.Request) (any, uint64, error) {
	accessor := r.PathValue("accessor")
	if err := s.aclStore.DeleteToken(r.Context(), accessor); err != nil {
		return nil, 0, fmt.Errorf("failed to delete ACL token: %w", err)
	}
	s.logger.Info("ACL token deleted", "accessor_id", accessor)
	return nil, 0, nil
}

// tokenOut is t in nomad/api's ACLToken shape, with secret as SecretID.
func tokenOut(t *acl.Token, secret string) *nomadapi.ACLToken {
	return &nomadapi.ACLToken{
		AccessorID: t.AccessorID, SecretID: secret, Name: t.Name, Type: t.Type,
		Policies: nonNilStrings(t.Policies), Global: t.Global, CreateTime: t.CreateTime,
		ExpirationTime: t.ExpirationTime, CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
	}
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
