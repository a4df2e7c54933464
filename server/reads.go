package server

import (
	"context"
	"fmt"

	"github.com/meshlet/meshlet/structs"
)

// Allocs returns every allocation sorted by job, group and index.
func (s *Server) Allocs(ctx context.Context) ([]*structs.Allocation, error) {
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	SortAllocs(allocs)
	return allocs, nil
}

// Alloc returns the allocation with the given ID or unique ID prefix.
func (s *Server) Alloc(ctx context.Context, idOrPrefix string) (*structs.Allocation, error) {
	if a, err := s.store.Alloc(idOrPrefix); err == nil {
		return a, nil
	}
	allocs, err := s.store.Allocs()
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	ids := make([]string, 0, len(allocs))
	for _, a := range allocs {
		ids = append(ids, a.ID)
	}
	id, err := lookupPrefix(ids, idOrPrefix)
	if err != nil {
		return nil, fmt.Errorf("failed to find allocation: %w", err)
	}
	return s.store.Alloc(id)
}

// Nodes returns every node sorted by ID.
func (s *Server) Nodes(ctx context.Context) ([]*structs.Node, error) {
	nodes, err := s.store.Nodes()
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	return nodes, nil
}

// Node returns the node with the given ID or unique ID prefix.
func (s *Server) Node(ctx context.Context, idOrPrefix string) (*structs.Node, error) {
	nodes, err := s.store.Nodes()
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	ids := make([]string, 0, len(nodes))
	byID := make(map[string]*structs.Node, len(nodes))
	for _, n := range nodes {
		ids = append(ids, n.ID)
		byID[n.ID] = n
	}
	id, err := lookupPrefix(ids, idOrPrefix)
	if err != nil {
		return nil, fmt.Errorf("failed to find node: %w", err)
	}
	return byID[id], nil
}
