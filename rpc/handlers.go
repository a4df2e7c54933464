package rpc

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/structs"
)

// nodeHeaders returns the node ID and secret a call carries, answering 400
// or 403 when they are missing or malformed.
func nodeHeaders(w http.ResponseWriter, r *http.Request) (id, secret string, ok bool) {
	id, secret = r.Header.Get(HeaderNodeID), r.Header.Get(HeaderNodeSecret)
	switch {
	case id == "" || len(id) > maxNodeIDLen:
		writeError(w, http.StatusBadRequest, "", "%v: header %s must hold a node ID of 1 to %d bytes", ErrBadRequest, HeaderNodeID, maxNodeIDLen)
	case secret == "":
		writeError(w, http.StatusForbidden, "", "%v: node secret required", ErrForbidden)
	default:
		return id, secret, true
	}
	return "", "", false
}

// authNode authenticates the calling node by its ID and secret against the
// stored node and returns its ID.
func (s *Server) authNode(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, secret, ok := nodeHeaders(w, r)
	if !ok {
		return "", false
	}
	node, err := s.cfg.Backend.Node(r.Context(), id)
	if err == nil && node == nil {
		err = structs.ErrUnknownNode
	}
	if err != nil {
		s.backendError(w, r, false, err)
		return "", false
	}
	if !secretEqual(nodeSecret(node), secret) {
		s.logger.Warn("refused call: node secret mismatch", "node_id", id, "remote", remoteOf(r), "path", r.URL.Path)
		writeError(w, http.StatusForbidden, "", "%v: node secret mismatch", ErrForbidden)
		return "", false
	}
	return id, true
}

// decodeBody decodes exactly one JSON value, answering 413 or 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := httpsrv.DecodeJSON(r.Body, v)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "", "%v: body larger than %d bytes", ErrBadRequest, MaxBodyBytes)
	default:
		writeError(w, http.StatusBadRequest, "", "%v: %v", ErrBadRequest, err)
	}
	return false
}

// handleRegister stores the calling node. The first registration of a node
// ID records its secret; a later one must present the same secret.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := nodeHeaders(w, r)
	if !ok {
		return
	}
	var node structs.Node
	if !decodeBody(w, r, &node) {
		return
	}
	if node.ID != id {
		writeError(w, http.StatusForbidden, "", "%v: a node may only register itself (header %s is %q, body node ID %q)", ErrForbidden, HeaderNodeID, id, node.ID)
		return
	}
	if body := nodeSecret(&node); body != "" && !secretEqual(body, secret) {
		writeError(w, http.StatusForbidden, "", "%v: node secret mismatch", ErrForbidden)
		return
	}
	setNodeSecret(&node, secret)
	defer s.lockNode(id)()
	stored, err := s.cfg.Backend.Node(r.Context(), id)
	if errors.Is(err, structs.ErrUnknownNode) {
		stored, err = nil, nil
	}
	if err != nil {
		s.backendError(w, r, true, err)
		return
	}
	if stored != nil && !secretEqual(nodeSecret(stored), secret) {
		s.logger.Warn("refused registration: node secret mismatch", "node_id", id, "remote", remoteOf(r))
		writeError(w, http.StatusForbidden, "", "%v: node secret mismatch", ErrForbidden)
		return
	}
	if err := s.cfg.Backend.RegisterNode(r.Context(), &node); err != nil {
		s.backendError(w, r, true, err)
		return
	}
	if stored == nil {
		s.logger.Info("node registered for the first time", "node_id", id, "remote", remoteOf(r))
	}
	writeJSON(w, struct{}{})
}

// handleAllocs long-polls the calling node's allocations:
// ?node_id=<id>&index=<minIndex>&wait=<duration>.
func (s *Server) handleAllocs(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authNode(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Get("node_id") != id {
		s.logger.Warn("refused read of another node's allocations", "node_id", id, "other_node_id", q.Get("node_id"))
		writeError(w, http.StatusForbidden, "", "%v: a node may only read its own allocations", ErrForbidden)
		return
	}
	var index uint64
	if v := q.Get("index"); v != "" {
		var err error
		if index, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, "", "%v: index %q is not a number", ErrBadRequest, v)
			return
		}
	}
	wait := s.cfg.MaxBlockingWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "", "%v: wait %q is not a duration", ErrBadRequest, v)
			return
		}
		wait = min(d, wait)
	}
	// Jitter spreads the answers of many nodes polling at once (Nomad).
	wait += rand.N(wait/16 + 1)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	allocs, idx, err := s.cfg.Backend.NodeAllocs(ctx, id, index)
	switch {
	case s.ctx.Err() != nil:
		writeError(w, http.StatusServiceUnavailable, codeShutdown, "server is shutting down")
	case err != nil && index > 0 && ctx.Err() != nil && r.Context().Err() == nil:
		// The wait ended with no change: the client polls again.
		writeJSON(w, allocsResponse{Index: index})
	case err != nil:
		s.backendError(w, r, false, err)
	default:
		writeJSON(w, allocsResponse{Allocs: allocs, Index: idx})
	}
}

// handleUpdate applies the calling node's allocation updates: every
// update must be of an allocation placed on the node, or none is applied.
// Updates of allocations the server no longer has are dropped.
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authNode(w, r)
	if !ok {
		return
	}
	var updates []*structs.Allocation
	if !decodeBody(w, r, &updates) {
		return
	}
	kept := make([]*structs.Allocation, 0, len(updates))
	for _, u := range updates {
		if u == nil || u.ID == "" {
			writeError(w, http.StatusBadRequest, "", "%v: an update has no allocation ID", ErrBadRequest)
			return
		}
		if u.NodeID != "" && u.NodeID != id {
			s.refuseUpdate(w, id, u.ID)
			return
		}
		stored, err := s.cfg.Backend.Alloc(r.Context(), u.ID)
		if err != nil {
			s.backendError(w, r, true, err)
			return
		}
		if stored == nil {
			s.logger.Debug("dropping update of an unknown allocation", "node_id", id, "alloc_id", u.ID)
			continue
		}
		if stored.NodeID != id {
			s.refuseUpdate(w, id, u.ID)
			return
		}
		kept = append(kept, u)
	}
	if len(kept) > 0 {
		if err := s.cfg.Backend.UpdateAllocs(r.Context(), kept); err != nil {
			s.backendError(w, r, true, err)
			return
		}
	}
	writeJSON(w, struct{}{})
}

func (s *Server) refuseUpdate(w http.ResponseWriter, nodeID, allocID string) {
	s.logger.Warn("refused update of another node's allocation", "node_id", nodeID, "alloc_id", allocID)
	writeError(w, http.StatusForbidden, "", "%v: allocation %s is not placed on node %s", ErrForbidden, allocID, nodeID)
}

// handleHeartbeat records that the calling node is alive.
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authNode(w, r)
	if !ok {
		return
	}
	var req heartbeatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.NodeID != id {
		writeError(w, http.StatusForbidden, "", "%v: a node may only heartbeat for itself", ErrForbidden)
		return
	}
	ttl, err := s.cfg.Backend.Heartbeat(r.Context(), id)
	if err != nil {
		s.backendError(w, r, true, err)
		return
	}
	writeJSON(w, heartbeatResponse{HeartbeatTTL: ttl})
}

// remoteOf names the caller for logs: the peer, and the original caller
// of a forwarded call.
func remoteOf(r *http.Request) string {
	if fwd := r.Header.Get("X-Forwarded-For"); fwd != "" && r.Header.Get(HeaderForwarded) != "" {
		return r.RemoteAddr + " for " + fwd
	}
	return r.RemoteAddr
}
