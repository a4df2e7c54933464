package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/intention"
)

// handleConnectIntentions writes the cluster's intentions.
func (s *Server) handleConnectIntentions(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	var req connectIntentionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if s.cfg.Tokens != nil {
		allowed, err := intentionAllowed(r.Context(), cb, req)
		if err != nil {
			s.backendError(w, r, false, err)
			return
		}
		if !s.callerAllowed(w, r, nodeID, "write an intention", allowed) {
			return
		}
	}
	var (
		out   connectIntentionResponse
		err   error
		iw    = cb.Intentions()
		ctx   = r.Context()
		malfo string
	)
	switch {
	case req.Op == intentionOpUpsert && req.Intention != nil:
		out.Intention, out.Index, err = iw.Upsert(ctx, *req.Intention, req.Replace)
		if errors.Is(err, intention.ErrExists) && !req.Replace && r.Header.Get(headerRetry) != "" {
			out, err = s.retriedCreate(ctx, cb, *req.Intention, err)
		}
	case req.Op == intentionOpDelete && req.Source != "" && req.Destination != "":
		out.Intention, out.Index, err = iw.Delete(ctx, req.Source, req.Destination)
	case req.Op == intentionOpDeleteByID && req.ID != "":
		out.Intention, out.Index, err = iw.DeleteByID(ctx, req.ID, nil)
	case req.Op == intentionOpUpdateByID && req.ID != "" && req.Intention != nil:
		out.Intention, out.Index, err = iw.UpdateByID(ctx, req.ID, *req.Intention, nil)
	case req.Op == intentionOpUpsert:
		malfo = "upsert needs an Intention"
	case req.Op == intentionOpUpdateByID:
		malfo = "update-by-id needs an ID and an Intention"
	case req.Op == intentionOpDelete:
		malfo = "delete needs Source and Destination"
	case req.Op == intentionOpDeleteByID:
		malfo = "delete-by-id needs an ID"
	default:
		malfo = fmt.Sprintf("unknown Op %.64q", req.Op)
	}
	if malfo != "" {
		writeError(w, http.StatusBadRequest, "", "%v: %s", ErrBadRequest, malfo)
		return
	}
	if err != nil {
		s.intentionError(w, r, err)
		return
	}
	s.logger.Debug("intention written", "node_id", nodeID, "op", req.Op, "intention_id", out.Intention.ID, "index", out.Index)
	writeJSON(w, &out)
}

// retriedCreate settles a create (Upsert without replace) that the client
// sent again after a server failed to answer it: when the stored
// intention for the pair is the one asked for (same action and
// description), the first attempt committed and this is its answer;
// otherwise the create fails with exists, its error.
func (s *Server) retriedCreate(ctx context.Context, cb ConnectBackend, in intention.Intention, exists error) (connectIntentionResponse, error) {
	st, _, err := cb.LoadIntentions(ctx)
	if err != nil {
		return connectIntentionResponse{}, exists
	}
	for _, cur := range st.Intentions {
		if cur.SourceName == in.SourceName && cur.DestinationName == in.DestinationName &&
			cur.Action == strings.ToLower(in.Action) && cur.Description == in.Description && (in.ID == "" || in.ID == cur.ID) {
			s.logger.Debug("retried intention create found its first attempt committed", "intention_id", cur.ID)
			return connectIntentionResponse{Intention: cur, Index: cur.ModifyIndex}, nil
		}
	}
	return connectIntentionResponse{}, exists
}

// intentionError answers an intention write's error, its sentinel named
// by a code the Client turns back into it.
func (s *Server) intentionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, intention.ErrExists):
		writeError(w, http.StatusConflict, codeIntentionExists, "%v", err)
	case errors.Is(err, intention.ErrNotFound):
		writeError(w, http.StatusNotFound, codeIntentionNotFound, "%v", err)
	case errors.Is(err, intention.ErrInvalid):
		writeError(w, http.StatusBadRequest, codeIntentionInvalid, "%v", err)
	default:
		s.backendError(w, r, false, err)
	}
}
