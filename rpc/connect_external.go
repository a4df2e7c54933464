package rpc

import (
	"context"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
)

// pathConnectExternal is the call through which a client agent stores the
// registrations of /v1/catalog/register (services outside the mesh).
const pathConnectExternal = "/v1/rpc/connect/external"

// connectExternalRequest stores (Instance set) or removes (Delete) one
// instance of a service outside the mesh, as the one instance of allocation
// Instance.AllocID on its external node Instance.NodeID.
type connectExternalRequest struct {
	Instance catalog.ServiceInstance `json:"Instance"`
	Delete   bool                    `json:"Delete,omitempty"`
}

// ExternalCatalog writes /v1/catalog/register's registrations through a
// server, with the caller's ACL token (from the context); it satisfies
// consulapi.CatalogWriter.
func (c *Client) ExternalCatalog() ExternalCatalog { return ExternalCatalog{c: c} }

// ExternalCatalog is Client.ExternalCatalog's writer.
type ExternalCatalog struct{ c *Client }

// PutExternal stores inst.
func (e ExternalCatalog) PutExternal(ctx context.Context, inst catalog.ServiceInstance) error {
	return e.c.connectCall(ctx, "register service "+inst.Name+" outside the mesh", http.MethodPost, pathConnectExternal,
		connectExternalRequest{Instance: inst}, nil)
}

// DeleteExternal removes inst's allocation (inst.Name, when set, is the
// service the caller's token must have service write on). pre is not
// sent: the server judges the caller's token, which ctx carries, on the
// registration it deletes.
func (e ExternalCatalog) DeleteExternal(ctx context.Context, inst catalog.ServiceInstance, _ func([]catalog.ServiceInstance) error) error {
	return e.c.connectCall(ctx, "deregister service "+inst.ID+" outside the mesh", http.MethodPost, pathConnectExternal,
		connectExternalRequest{Instance: inst, Delete: true}, nil)
}

// handleConnectExternal stores or removes a service outside the mesh for
// a client agent: only on an external node (never a node's own
// allocations), only a plain service (no proxy, no gateway), and with ACLs
// only with the caller's node write and service write on the service (to
// delete one whose name the client does not know, a management token).
func (s *Server) handleConnectExternal(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	var req connectExternalRequest
	if !decodeBody(w, r, &req) {
		return
	}
	in := req.Instance
	switch {
	case !strings.HasPrefix(in.NodeID, catalog.ExternalNodePrefix) || in.NodeID == catalog.ExternalNodePrefix:
		writeError(w, http.StatusBadRequest, "", "%v: node %q is not an external node", ErrBadRequest, in.NodeID)
		return
	case in.AllocID == "" || strings.ContainsAny(in.AllocID+in.NodeID, "/\x00") || len(in.AllocID) > maxAllocIDLen:
		writeError(w, http.StatusBadRequest, "", "%v: allocation ID must be 1 to %d bytes without '/'", ErrBadRequest, maxAllocIDLen)
		return
	case !req.Delete && (in.Kind != "" || in.Proxy != nil || in.Name == "" || in.ID == ""):
		writeError(w, http.StatusBadRequest, "", "%v: an external service is a named plain service (no kind, no proxy)", ErrBadRequest)
		return
	}
	stored, err := storedNames(r.Context(), cb, in.NodeID, in.AllocID)
	if err != nil {
		s.backendError(w, r, false, err)
		return
	}
	allowed := func(a *acl.ACL) bool {
		if !a.AllowNodeWrite() {
			return false
		}
		for _, name := range stored { // what the write replaces or deletes
			if !a.AllowServiceWrite(name) {
				return false
			}
		}
		if in.Name == "" {
			return a.IsManagement()
		}
		return a.AllowServiceWrite(in.Name)
	}
	if !s.callerAllowed(w, r, nodeID, "register a service outside the mesh", allowed) {
		return
	}
	switch ew, ok := cb.(ExternalWriter); {
	case req.Delete:
		err = cb.DeleteAlloc(r.Context(), in.NodeID, in.AllocID)
	case ok:
		err = ew.PutExternal(r.Context(), in) // refuses another node's or a job's ID
	default:
		err = cb.PutAlloc(r.Context(), in.NodeID, in.AllocID, []catalog.ServiceInstance{in})
	}
	if err != nil {
		s.backendError(w, r, false, err)
		return
	}
	s.logger.Debug("stored a service outside the mesh", "node_id", nodeID, "service", in.Name, "external_node", in.NodeID, "delete", req.Delete)
	writeJSON(w, struct{}{})
}

// ExternalWriter is a ConnectBackend that stores a service outside the
// mesh itself, refusing an ID another node's instance or a job's has
// (catalog.ErrIDTaken; the servers' meshstate.Store does).
type ExternalWriter interface {
	PutExternal(ctx context.Context, inst catalog.ServiceInstance) error
}

// NodeRegsReader is a ConnectBackend that reads a node's stored
// registrations (the servers' meshstate.Store does).
type NodeRegsReader interface {
	NodeRegs(ctx context.Context, nodeID string) (map[string][]catalog.ServiceInstance, error)
}

// storedNames are the service names of the registration stored at
// nodeID/allocID: an external write that replaces or deletes it needs
// write on them, not only on the name the caller sends (Consul checks the
// registered service). None when the backend keeps nothing readable.
func storedNames(ctx context.Context, cb ConnectBackend, nodeID, allocID string) ([]string, error) {
	r, ok := cb.(NodeRegsReader)
	if !ok {
		return nil, nil
	}
	regs, err := r.NodeRegs(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, in := range regs[allocID] {
		names = append(names, in.Name)
	}
	return names, nil
}
