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

// codeCAConflict: the rotation kept losing races with other servers'
// changes to the CA state (HTTP 409).
const codeCAConflict = "ca_state_conflict"

// maxRotateAttempts bounds a rotation's retries after a lost race (the
// CA reloads the stored state after each).
const maxRotateAttempts = 3

// handleConnectCARotate rotates the CA root for an authenticated node.
func (s *Server) handleConnectCARotate(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	var err error
	for range maxRotateAttempts {
		if err = cb.RotateCA(r.Context()); !errors.Is(err, ca.ErrStateConflict) {
			break
		}
	}
	switch {
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
// new root is stored; this agent's roots follow through the mesh feed.
// Like the other mesh calls it moves to the next server on a connection
// error or a 5xx: if a server failed after storing the new root, the
// next one rotates again (one more root, no harm).
func (c *Client) RotateCA(ctx context.Context) error {
	return c.connectCall(ctx, "rotate the CA root", http.MethodPost, pathConnectCARotate, nil, nil)
}
