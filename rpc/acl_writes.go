package rpc

import (
	"context"
	"errors"
	"net/http"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// Mesh writes on behalf of a caller. A client agent makes the intention,
// config entry and CA rotation writes of its connect API through the
// servers; with ServerConfig.Tokens set (ACLs enabled) the servers judge
// each again with the caller's token (HeaderToken, which the client sends
// from the request's context: acl.ContextWithSecret), by the rules the
// connect API applies, so node credentials alone cannot write the
// cluster's intentions or rotate its CA. A missing header is the
// anonymous token.

// TokenResolver resolves a caller's secret to its ACL ("" is the
// anonymous token); *acl.Resolver implements it.
type TokenResolver interface {
	Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error)
}

// codeACLPermissionDenied: the caller's token does not allow the write
// (HTTP 403); the Client turns it into acl.ErrPermissionDenied.
const codeACLPermissionDenied = "acl_permission_denied"

// callerAllowed reports whether the request's caller may make the write
// allowed judges; it answers 403 when not. Without ServerConfig.Tokens
// every authenticated node may.
func (s *Server) callerAllowed(w http.ResponseWriter, r *http.Request, nodeID, what string, allowed func(*acl.ACL) bool) bool {
	if s.cfg.Tokens == nil {
		return true
	}
	authz, tok, err := s.cfg.Tokens.Resolve(r.Context(), r.Header.Get(HeaderToken))
	switch {
	case errors.Is(err, acl.ErrTokenNotFound):
		s.logger.Warn("refused a mesh write: unknown ACL token", "node_id", nodeID, "write", what)
		writeError(w, http.StatusForbidden, codeACLTokenNotFound, "%v", acl.ErrTokenNotFound)
		return false
	case err != nil:
		s.backendError(w, r, false, err)
		return false
	case !allowed(authz):
		accessor := ""
		if tok != nil {
			accessor = tok.AccessorID
		}
		s.logger.Warn("refused a mesh write the caller's token does not allow", "node_id", nodeID, "write", what, "accessor_id", accessor)
		writeError(w, http.StatusForbidden, codeACLPermissionDenied, "%v", acl.ErrPermissionDenied)
		return false
	}
	return true
}

// intentionAllowed is the connect API's rule for an intention write:
// intention write on its destination — for a write naming an existing
// intention by ID, on that intention's destination too. An intention's
// destination never changes (State.UpdateByID refuses it) and IDs are not
// reused, so the destination read here is the one the write changes.
func intentionAllowed(ctx context.Context, cb ConnectBackend, req connectIntentionRequest) (func(*acl.ACL) bool, error) {
	var dests []string
	switch req.Op {
	case intentionOpUpsert, intentionOpUpdateByID:
		if req.Intention != nil {
			dests = append(dests, req.Intention.DestinationName)
		}
	case intentionOpDelete:
		dests = append(dests, req.Destination)
	}
	id := req.ID
	if req.Op == intentionOpUpsert && req.Intention != nil {
		id = req.Intention.ID
	}
	if id != "" {
		st, _, err := cb.LoadIntentions(ctx)
		if err != nil {
			return nil, err
		}
		if d, ok := destinationOf(st, id); ok {
			dests = append(dests, d)
		}
	}
	return func(a *acl.ACL) bool {
		for _, d := range dests {
			if !a.AllowIntentionWrite(d) {
				return false
			}
		}
		return true
	}, nil
}

func destinationOf(st intention.State, id string) (string, bool) {
	for _, in := range st.Intentions {
		if in.ID == id {
			return in.DestinationName, true
		}
	}
	return "", false
}

// configWriteAllowed is the connect API's rule for a config entry write.
func configWriteAllowed(kind, name string) func(*acl.ACL) bool {
	return func(a *acl.ACL) bool { return configentry.Allowed(a, kind, name, true) }
}

// rotateAllowed: a CA rotation needs operator write.
func rotateAllowed(a *acl.ACL) bool { return a.AllowOperatorWrite() }
