package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/sitoken"
)

// The workload-token call: a client agent asks the servers for the
// service identity token of one of its connect proxy tasks (package
// sitoken), before the task starts:
//
//	POST /v1/rpc/acl/workload-token {"AllocID": ..., "Task": ...} -> {"AccessorID": ..., "SecretID": ...}
//
// The caller must be an authenticated node, and the allocation must be
// placed on it (403 otherwise; 404 for an unknown allocation). Without
// ServerConfig.WorkloadTokens (ACLs disabled) it answers 404 with code
// acl_disabled (acl.ErrDisabled on the client). The answer carries the
// secret once; neither side logs it.
const pathACLWorkloadToken = "/v1/rpc/acl/workload-token"

// WorkloadTokenMinter mints service identity tokens: *sitoken.Minter.
type WorkloadTokenMinter interface {
	Derive(ctx context.Context, nodeID, allocID, task string) (*acl.Token, error)
}

type workloadTokenRequest struct {
	AllocID string `json:"AllocID"`
	Task    string `json:"Task"`
}

type workloadTokenResponse struct {
	AccessorID string `json:"AccessorID"`
	SecretID   string `json:"SecretID"`
}

// maxTaskNameLen bounds a task name in a workload-token call.
const maxTaskNameLen = 256

func (s *Server) handleACLWorkloadToken(w http.ResponseWriter, r *http.Request) {
	nodeID, ok := s.authNode(w, r)
	if !ok {
		return
	}
	if s.cfg.WorkloadTokens == nil {
		writeError(w, http.StatusNotFound, codeACLDisabled, "%v on this server", acl.ErrDisabled)
		return
	}
	var req workloadTokenRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.AllocID == "" || len(req.AllocID) > maxAllocIDLen || req.Task == "" || len(req.Task) > maxTaskNameLen {
		writeError(w, http.StatusBadRequest, "", "%v: AllocID (1 to %d bytes) and Task (1 to %d bytes) are required",
			ErrBadRequest, maxAllocIDLen, maxTaskNameLen)
		return
	}
	tok, err := s.cfg.WorkloadTokens.Derive(r.Context(), nodeID, req.AllocID, req.Task)
	switch {
	case errors.Is(err, sitoken.ErrRefused):
		writeError(w, http.StatusForbidden, "", "%v: %v", ErrForbidden, err)
		return
	case errors.Is(err, sitoken.ErrUnknownAlloc):
		writeError(w, http.StatusNotFound, "", "%v", err)
		return
	case err != nil:
		s.backendError(w, r, false, err)
		return
	}
	writeJSON(w, &workloadTokenResponse{AccessorID: tok.AccessorID, SecretID: tok.SecretID})
}

// DeriveSIToken asks the servers for the service identity token of task,
// a connect proxy task of allocation allocID placed on this node, and
// returns its secret. It fails with acl.ErrDisabled when the servers run
// without ACLs and with ErrForbidden when they refuse.
func (c *Client) DeriveSIToken(ctx context.Context, allocID, task string) (string, error) {
	var out workloadTokenResponse
	err := c.connectCall(ctx, "derive a service identity token", http.MethodPost, pathACLWorkloadToken,
		workloadTokenRequest{AllocID: allocID, Task: task}, &out)
	if err != nil {
		return "", err
	}
	if out.SecretID == "" {
		return "", fmt.Errorf("failed to derive a service identity token: the server answered no secret")
	}
	return out.SecretID, nil
}
