package api

import (
	"context"
	"errors"
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

// findNode resolves a full node ID or a unique prefix.
func (s *Server) findNode(ctx context.Context, id string) (*structs.Node, error) {
	n, err := s.b.GetNode(ctx, id)
	if err == nil {
		return n, nil
	}
	if !errors.Is(err, ErrNotFound) || id == "" {
		return nil, fmt.Errorf("failed to get node: %w", err)
	}
	nodes, lerr := s.b.ListNodes(ctx)
	if lerr != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", lerr)
	}
	var match []*structs.Node
	for _, cand := range nodes {
		if strings.HasPrefix(cand.ID, id) {
			match = append(match, cand)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("node %q: %w", id, ErrNotFound)
	case 1:
		return match[0], nil
	}
	return nil, fmt.Errorf("node prefix %q matches %d nodes: %w", id, len(match), ErrAmbiguousPrefix)
}

func (s *Server) getNode(r *http.Request) (any, error) {
	return s.findNode(r.Context(), r.PathValue("id"))
}

func (s *Server) nodeAllocations(r *http.Request) (any, error) {
	n, err := s.findNode(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
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
