package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/meshlet/meshlet/structs"
)

// JobVersionsBackend lists a job's stored versions, newest first.
type JobVersionsBackend interface {
	JobVersions(ctx context.Context, id string) ([]*structs.Job, error)
}

// jobVersions answers /v1/job/{id}/versions in nomad/api's
// JobVersionsResponse shape (no diffs).
func (s *Server) jobVersions(r *http.Request) (any, error) {
	vb, ok := s.b.(JobVersionsBackend)
	if !ok {
		return nil, fmt.Errorf("%w: this agent keeps no job versions", ErrNotFound)
	}
	versions, err := vb.JobVersions(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to list versions: %w", err)
	}
	return map[string]any{"Versions": versions, "Diffs": nil}, nil
}
