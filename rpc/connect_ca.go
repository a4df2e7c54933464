package rpc

import (
	"context"
	"errors"
	"net/http"

	"github.com/meshlet/meshlet/ca"
)

// CA root rotation for client agents: POST /v1/rpc/connect/ca/rotate (no
// body) has the servers rotate the cluster's CA root (ConnectBackend
// .RotateCA: a new root cross-signed by the old one, stored in etcd; the
// other servers reload it and client agents receive it through the mesh
// feed). A client agent calls it for PUT /v1/connect/ca/configuration on
// its Consul-shaped API. The caller must be an authenticated node, as for
// the other mesh calls; none needs the leader (the CA state is a
// compare-and-swap from any server).

// codeCAConflict: the rotation lost a race with another server's change
// to the CA state (HTTP 409); the Client turns it back into
// ca.ErrStateConflict.
const codeCAConflict = "ca_state_conflict"

// handleConnectCARotate rotates the CA root for an authenticated node,
// once: a lost race is answered 409 at once. The caller retries (the
// connect API's PUT does, consulapi.rotateRetrying: one retry loop for a
// server agent's own CA and a client agent's call through here alike).
func (s *Server) handleConnectCARotate(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok || !s.callerAllowed(w, r, nodeID, "rotate the CA root", rotateAllowed) {
		return
	}
	switch err := cb.RotateCA(r.Context()); {
	case errors.Is(err, ca.ErrStateConflict):
		writeError(w, http.StatusConflict, codeCAConflict, "%v", err)
		return
	case err != nil:
		s.backendError(w, r, false, err)
		return
	}
	s.logger.Info("rotated the CA root at a node's request", "node_id", nodeID)
	writeJSON(w, struct{}{})
}

// RotateCA has a server rotate the cluster's CA root. It returns once the
// new root is stored; this agent's roots follow through the mesh feed. A
// rotation that lost a race with another server's change is an error
// wrapping ca.ErrStateConflict (the caller may retry; nothing changed).
//
// A rotation is not idempotent, yet like the other mesh calls it moves to
// the next server on a connection error, a timeout or a 5xx: when the
// first server stored the new root but its answer was lost, the next one
// rotates again. The cost is one extra root, cross-signed like any other
// and dropped after the usual overlap; leaves are re-issued once more.
// That is harmless, and cheaper than a rotation that silently did not
// happen.
func (c *Client) RotateCA(ctx context.Context) error {
	return c.connectCall(ctx, "rotate the CA root", http.MethodPost, pathConnectCARotate, nil, nil)
}
