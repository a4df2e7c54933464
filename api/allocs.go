package api

import (
	"fmt"
	"net/http"
	"strings"
)

func (s *Server) allocRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/allocations", s.read(s.listAllocations))
	mux.HandleFunc("GET /v1/allocation/{id}", s.read(s.getAllocation))
}

func (s *Server) listAllocations(r *http.Request) (any, error) {
	allocs, err := s.b.ListAllocations(r.Context())
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	prefix := r.URL.Query().Get("prefix")
	out := make([]*AllocListStub, 0, len(allocs))
	for _, a := range allocs {
		if strings.HasPrefix(a.ID, prefix) {
			out = append(out, NewAllocListStub(a))
		}
	}
	return out, nil
}

func (s *Server) getAllocation(r *http.Request) (any, error) {
	a, err := s.b.GetAllocation(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to get allocation: %w", err)
	}
	return a, nil
}
