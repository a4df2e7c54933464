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
	for _, m := range []string{"PUT", "POST"} {
		mux.HandleFunc(m+" /v1/node/{id}/eligibility", s.write(s.nodeEligibility))
		mux.HandleFunc(m+" /v1/node/{id}/drain", s.write(s.nodeDrain))
	}
}

// NodeUpdateEligibilityRequest is the body of PUT /v1/node/:id/eligibility.
type NodeUpdateEligibilityRequest struct {
	NodeID      string
	Eligibility string
}

// NodeUpdateDrainRequest is the body of PUT /v1/node/:id/drain; a nil
// DrainSpec cancels the drain. Meta is accepted and ignored.
type NodeUpdateDrainRequest struct {
	NodeID       string
	DrainSpec    *structs.DrainSpec
	MarkEligible bool
	Meta         map[string]string `json:",omitempty"`
}

// NodeUpdateResponse answers a drain or eligibility change (Nomad's
// NodeDrainUpdateResponse and NodeEligibilityUpdateResponse).
type NodeUpdateResponse struct {
	EvalIDs         []string
	EvalCreateIndex uint64
	NodeModifyIndex uint64
	Index           uint64
}

func (s *Server) nodeEligibility(r *http.Request) (any, uint64, error) {
	var req NodeUpdateEligibilityRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	id, err := nodeRequestID(r, req.NodeID)
	if err != nil {
		return nil, 0, err
	}
	var eligible bool
	switch req.Eligibility {
	case structs.NodeSchedulingEligible:
		eligible = true
	case structs.NodeSchedulingIneligible:
	default:
		return nil, 0, fmt.Errorf("%w: invalid scheduling eligibility %q (want %q or %q)", ErrInvalid,
			req.Eligibility, structs.NodeSchedulingEligible, structs.NodeSchedulingIneligible)
	}
	res, err := s.b.UpdateNodeEligibility(r.Context(), id, eligible)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to update node eligibility: %w", err)
	}
	return s.nodeUpdateResponse(res)
}

func (s *Server) nodeDrain(r *http.Request) (any, uint64, error) {
	var req NodeUpdateDrainRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	id, err := nodeRequestID(r, req.NodeID)
	if err != nil {
		return nil, 0, err
	}
	res, err := s.b.UpdateNodeDrain(r.Context(), id, req.DrainSpec, req.MarkEligible)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to update node drain: %w", err)
	}
	return s.nodeUpdateResponse(res)
}

// nodeRequestID is the node a write names in its path; a body naming
// another node is rejected.
func nodeRequestID(r *http.Request, bodyID string) (string, error) {
	id := r.PathValue("id")
	if bodyID != "" && bodyID != id {
		return "", fmt.Errorf("%w: node ID %q does not match request path %q", ErrInvalid, bodyID, id)
	}
	return id, nil
}

// nodeUpdateResponse reports the node's modify index as the write's: a
// drain monitor blocking on it sees the drain's completion even when it
// came within the request (an empty node).
func (s *Server) nodeUpdateResponse(res *NodeUpdateResult) (any, uint64, error) {
	out := &NodeUpdateResponse{EvalIDs: res.EvalIDs, NodeModifyIndex: res.NodeModifyIndex, Index: res.NodeModifyIndex}
	if out.EvalIDs == nil {
		out.EvalIDs = []string{}
	}
	if len(out.EvalIDs) > 0 {
		out.EvalCreateIndex = s.b.Index()
	}
	return out, res.NodeModifyIndex, nil
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
	out := n.Sanitize()
	out.SchedulingEligibility = eligibility(n)
	return &nodeInfo{Node: out, NodePool: defaultNodePool}, nil
}

// defaultNodePool is the node pool of every node: meshlet has Nomad's
// built-in one only.
const defaultNodePool = "default"

// nodeInfo is a node as GET /v1/node/:id serves it, in its pool.
type nodeInfo struct {
	*structs.Node
	NodePool string
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
