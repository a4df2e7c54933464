package rpc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// pathJoin is how a new server asks to become an etcd member.
const pathJoin = "/v1/rpc/server/join"

// JoinRequest asks the cluster to add a server's etcd member.
type JoinRequest struct {
	Name    string `json:"Name"`
	PeerURL string `json:"PeerURL"`
}

// JoinResponse carries what the new member starts with.
type JoinResponse struct {
	InitialCluster string `json:"InitialCluster"`
}

// Joiner adds a server to the cluster's etcd membership (servers only).
type Joiner func(ctx context.Context, name, peerURL string) (initialCluster string, err error)

// handleJoin serves a server's join: only a peer with a server
// certificate (or any peer without TLS) may add a member.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Join == nil {
		writeError(w, http.StatusNotFound, "", "this agent does not take server joins")
		return
	}
	if role, _ := peerRole(r); r.TLS != nil && role != roleServer {
		writeError(w, http.StatusForbidden, "", "only a server may join the cluster")
		return
	}
	var req JoinRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Name == "" || req.PeerURL == "" {
		writeError(w, http.StatusBadRequest, "", "%v: a join needs Name and PeerURL", ErrBadRequest)
		return
	}
	ic, err := s.cfg.Join(r.Context(), req.Name, req.PeerURL)
	if err != nil {
		s.logger.Warn("server join failed", "server", req.Name, "error", err)
		writeError(w, http.StatusInternalServerError, "", "failed to add %s: %v", req.Name, err)
		return
	}
	s.logger.Info("server joined", "server", req.Name, "peer_url", req.PeerURL)
	writeJSON(w, &JoinResponse{InitialCluster: ic})
}

// apiHandler serves the agent's /v1 HTTP API on the RPC port to
// authenticated agents (client agents forward their users' requests here).
func (s *Server) apiHandler(w http.ResponseWriter, r *http.Request) {
	if s.cfg.API == nil || strings.HasPrefix(r.URL.Path, "/v1/rpc/") {
		http.NotFound(w, r)
		return
	}
	s.cfg.API.ServeHTTP(w, r)
}

// Join asks the servers in addrs, in turn, to add this server's etcd
// member, and returns the cluster the member starts with. tlsCfg is the
// joining server's client configuration (nil: plaintext).
func Join(ctx context.Context, addrs []string, tlsCfg *tls.Config, req JoinRequest, timeout time.Duration) (*JoinResponse, error) {
	c, err := NewClient(ClientConfig{Servers: addrs, TLS: tlsCfg, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	body, err := json.Marshal(&req)
	if err != nil {
		return nil, err
	}
	var out JoinResponse
	call := &request{what: "join the cluster", method: http.MethodPost, path: pathJoin, body: body, timeout: timeout, write: true}
	if err := c.call(ctx, call, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
