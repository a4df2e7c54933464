package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshlet/meshlet/acl"
)

// ACL reads for client agents: a client agent resolves the tokens of its
// API's requests through the servers (package acl's Reader):
//
//	POST /v1/rpc/acl/token     {"SecretHash": ...} -> {"Token": ...}
//	POST /v1/rpc/acl/policies  {"Names": [...]}    -> {"Policies": [...]}
//
// The servers answer from ServerConfig.ACL (their own state); without it
// both calls answer 404 with code acl_disabled (acl.ErrDisabled on the
// client). A secret hash that names no token (or an expired one) is 404
// with code acl_token_not_found (acl.ErrTokenNotFound). The caller must be
// an authenticated node, as for the mesh calls: a client agent resolves
// tokens once its node registered. The calls are reads: any server
// answers, and like the mesh calls they move to the next server on a
// connection error, a timeout or a 5xx.
//
// Only the secret's hash crosses the network, never the secret; neither
// side logs the hash.

// Paths of the ACL calls.
const (
	pathACLToken    = "/v1/rpc/acl/token"
	pathACLPolicies = "/v1/rpc/acl/policies"
)

// Error codes (headerErrorCode) of the ACL calls.
const (
	codeACLDisabled      = "acl_disabled"
	codeACLTokenNotFound = "acl_token_not_found"
)

// maxACLPolicyNames bounds the names of one policies call.
const maxACLPolicyNames = 1024

// aclTokenRequest is the body of the token call.
type aclTokenRequest struct {
	SecretHash string `json:"SecretHash"`
}

// aclTokenResponse is the token of the secret hash, without its secret.
type aclTokenResponse struct {
	Token *acl.Token `json:"Token"`
}

// aclPoliciesRequest is the body of the policies call.
type aclPoliciesRequest struct {
	Names []string `json:"Names"`
}

// aclPoliciesResponse is the named policies that exist.
type aclPoliciesResponse struct {
	Policies []*acl.Policy `json:"Policies"`
}

// aclSentinel is the acl sentinel of an error code, nil for other codes.
func aclSentinel(code string) error {
	switch code {
	case codeACLDisabled:
		return acl.ErrDisabled
	case codeACLTokenNotFound:
		return acl.ErrTokenNotFound
	case codeACLPermissionDenied:
		return acl.ErrPermissionDenied
	}
	return nil
}

// aclRoutes adds the ACL calls to mux.
func (s *Server) aclRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+pathACLToken, s.handleACLToken)
	mux.HandleFunc("POST "+pathACLPolicies, s.handleACLPolicies)
	mux.HandleFunc("POST "+pathACLWorkloadToken, s.handleACLWorkloadToken)
}

// aclNode authenticates the calling node and returns the server's ACL
// reader, answering 404 (acl_disabled) when it has none.
func (s *Server) aclNode(w http.ResponseWriter, r *http.Request) (acl.Reader, string, bool) {
	id, ok := s.authNode(w, r)
	if !ok {
		return nil, "", false
	}
	if s.cfg.ACL == nil {
		writeError(w, http.StatusNotFound, codeACLDisabled, "%v on this server", acl.ErrDisabled)
		return nil, "", false
	}
	return s.cfg.ACL, id, true
}

// handleACLToken answers the token of a secret hash.
func (s *Server) handleACLToken(w http.ResponseWriter, r *http.Request) {
	rd, nodeID, ok := s.aclNode(w, r)
	if !ok {
		return
	}
	var req aclTokenRequest
	if !decodeBody(w, r, &req) {
		return
	}
	tok, err := rd.TokenBySecretHash(r.Context(), req.SecretHash)
	if err == nil && tok == nil {
		err = acl.ErrTokenNotFound
	}
	if err != nil {
		s.aclError(w, r, err)
		return
	}
	cp := *tok
	cp.SecretID = "" // a reader never has it; never send it anyway
	s.logger.Debug("resolved ACL token for a client agent", "node_id", nodeID, "accessor_id", cp.AccessorID)
	writeJSON(w, &aclTokenResponse{Token: &cp})
}

// handleACLPolicies answers the named policies that exist.
func (s *Server) handleACLPolicies(w http.ResponseWriter, r *http.Request) {
	rd, nodeID, ok := s.aclNode(w, r)
	if !ok {
		return
	}
	var req aclPoliciesRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Names) > maxACLPolicyNames {
		writeError(w, http.StatusBadRequest, "", "%v: at most %d policy names per call", ErrBadRequest, maxACLPolicyNames)
		return
	}
	ps, err := rd.Policies(r.Context(), req.Names)
	if err != nil {
		s.aclError(w, r, err)
		return
	}
	if ps == nil {
		ps = []*acl.Policy{}
	}
	s.logger.Debug("read ACL policies for a client agent", "node_id", nodeID, "asked", len(req.Names), "found", len(ps))
	writeJSON(w, &aclPoliciesResponse{Policies: ps})
}

// aclError answers an ACL reader's error, its sentinel named by a code
// the Client turns back into it; other errors are the server's failure
// (the client tries the next server).
func (s *Server) aclError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, acl.ErrTokenNotFound):
		writeError(w, http.StatusNotFound, codeACLTokenNotFound, "%v", acl.ErrTokenNotFound)
	case errors.Is(err, acl.ErrDisabled):
		writeError(w, http.StatusNotFound, codeACLDisabled, "%v", err)
	default:
		s.backendError(w, r, false, err)
	}
}

// ACLReader resolves tokens and policies through the servers: the
// acl.Reader of a client agent. Its errors wrap acl.ErrTokenNotFound and
// acl.ErrDisabled as the servers answered them; any other failure of
// every server is ErrNoServers. It caches nothing.
type ACLReader struct{ c *Client }

var _ acl.Reader = (*ACLReader)(nil)

// ACL returns the ACLReader of the Client's node.
func (c *Client) ACL() *ACLReader { return &ACLReader{c: c} }

// TokenBySecretHash returns the token whose secret hashes to hash
// (without its secret), or an error wrapping acl.ErrTokenNotFound.
func (a *ACLReader) TokenBySecretHash(ctx context.Context, hash string) (*acl.Token, error) {
	if hash == "" {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	var out aclTokenResponse
	err := a.c.connectCall(ctx, "resolve an ACL token", http.MethodPost, pathACLToken, aclTokenRequest{SecretHash: hash}, &out)
	switch {
	case err != nil:
		return nil, err
	case out.Token == nil:
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	out.Token.SecretID = ""
	return out.Token, nil
}

// Policies returns the named policies that exist (missing names are
// skipped); no names make no call.
func (a *ACLReader) Policies(ctx context.Context, names []string) ([]*acl.Policy, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if len(names) > maxACLPolicyNames {
		return nil, fmt.Errorf("failed to read ACL policies: %w: more than %d names", ErrBadRequest, maxACLPolicyNames)
	}
	var out aclPoliciesResponse
	if err := a.c.connectCall(ctx, "read ACL policies", http.MethodPost, pathACLPolicies, aclPoliciesRequest{Names: names}, &out); err != nil {
		return nil, err
	}
	return out.Policies, nil
}
