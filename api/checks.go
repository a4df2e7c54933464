package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	nomadapi "github.com/hashicorp/nomad/api"
)

// CheckBackend is optionally implemented by a Backend whose node runs
// allocations: the last results of an allocation's service checks.
type CheckBackend interface {
	// AllocChecks returns the allocation's check results by check ID; an
	// allocation this node does not run is ErrNotFound.
	AllocChecks(ctx context.Context, allocID string) (nomadapi.AllocCheckStatuses, error)
}

// ErrNoChecks: this agent runs no allocations (no client role).
var ErrNoChecks = errors.New("this agent runs no allocations")

// handleChecks serves GET /v1/client/allocation/:alloc/checks in Nomad's
// shape (nomadapi.Allocations().Checks): the client agent of the
// allocation's node answers (a server forwards to it).
func (s *Server) handleChecks(w http.ResponseWriter, r *http.Request) {
	cb, ok := s.b.(CheckBackend)
	if !ok {
		s.writeError(w, r, fmt.Errorf("%w: %w", ErrNotFound, ErrNoChecks))
		return
	}
	alloc, err := s.b.GetAllocation(r.Context(), r.PathValue("alloc"))
	if err != nil {
		s.writeError(w, r, fmt.Errorf("failed to get allocation: %w", err))
		return
	}
	out, err := cb.AllocChecks(r.Context(), alloc.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if out == nil {
		out = nomadapi.AllocCheckStatuses{}
	}
	s.writeJSON(w, r, out)
}
