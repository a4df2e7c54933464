package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

func (s *Server) nodeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/nodes", s.read(s.listNodes))
	mux.HandleFunc("GET /v1/node/{id}", s.read(s.getNode))
	mux.HandleFunc("GET /v1/node/{id}/allocations", s.read(s.nodeAllocations))
}

func (s *Server) listNodes(r *http.Request) (any, error) {
	nodes, err := s.b.ListNodes(r.Context())
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	prefix := r.URL.Query().Get("prefix")
	out := make([]*NodeListStub, 0, len(nodes))
	for _, n := range nodes {
		if strings.HasPrefix(n.ID, prefix) {
			out = append(out, newNodeListStub(n, s.info.Version))
		}
	}
	return out, nil
}

func (s *Server) getNode(r *http.Request) (any, error) {
	n, err := s.b.GetNode(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to get node: %w", err)
	}
	return n, nil
}

func (s *Server) nodeAllocations(r *http.Request) (any, error) {
	n, err := s.b.GetNode(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to get node: %w", err)
	}
	allocs, err := s.b.ListAllocations(r.Context())
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	out := make([]*structs.Allocation, 0, len(allocs))
	for _, a := range allocs {
		if a.NodeID == n.ID {
			out = append(out, a)
		}
	}
	return out, nil
}

// hostOnly strips the port from "host:port".
func hostOnly(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
