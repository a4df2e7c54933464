package rpc

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/structs"
)

// ConnectBackend is the mesh state a server serves to client agents (the
// servers' etcd store, package meshstate). Its writes compare-and-swap
// from any server: none needs the leader.
type ConnectBackend interface {
	// Follow streams the mesh feed (a Reset batch, then changes) until ctx
	// ends, fn returns an error or the feed fails (the stream then ends
	// and the client follows another server: a server whose state store
	// lost the cluster must not keep its followers on stale state).
	Follow(ctx context.Context, fn func(meshstate.Batch) error) error
	// PutAlloc replaces the service registrations of one allocation.
	PutAlloc(ctx context.Context, nodeID, allocID string, insts []catalog.ServiceInstance) error
	// DeleteAlloc removes them; an absent key is no error.
	DeleteAlloc(ctx context.Context, nodeID, allocID string) error
	// SignCSR signs csrPEM as service's leaf. A malformed CSR should be
	// an error wrapping ErrBadRequest (or ca.ErrInvalidService).
	SignCSR(ctx context.Context, service, csrPEM string) (ca.SignedCert, error)
	// Intentions writes the cluster's intentions.
	Intentions() intention.Writer
	// LoadIntentions reads the stored intentions (found is false when none
	// were ever stored): a retried create checks whether its first
	// attempt committed.
	LoadIntentions(ctx context.Context) (st intention.State, found bool, err error)
	// Roots are the CA's public roots (no key material).
	Roots(ctx context.Context) (ca.Roots, error)
	// RotateCA makes a new CA root active, cross-signed by the old one
	// (ca.Manager.Rotate on the servers' etcd-backed CA).
	RotateCA(ctx context.Context) error
}

// ErrConnectNotServed: the server serves no mesh calls (no
// ServerConfig.Connect; HTTP 404).
var ErrConnectNotServed = errors.New("connect not served")

// Error codes (headerErrorCode) of the mesh calls.
const (
	codeConnectNotServed  = "connect_not_served"
	codeIntentionExists   = "intention_exists"
	codeIntentionNotFound = "intention_not_found"
	codeIntentionInvalid  = "intention_invalid"
)

// Intention operations of the intentions call.
const (
	intentionOpUpsert     = "upsert"
	intentionOpDelete     = "delete"
	intentionOpDeleteByID = "delete-by-id"
	intentionOpUpdateByID = "update-by-id"
)

// maxAllocIDLen bounds an allocation ID in a path.
const maxAllocIDLen = 128

// connectAllocRequest is the body of PUT /v1/rpc/connect/alloc/<id>.
type connectAllocRequest struct {
	Instances []catalog.ServiceInstance `json:"Instances"`
}

// connectSignRequest is the body of POST /v1/rpc/connect/sign; the answer
// is a ca.SignedCert.
type connectSignRequest struct {
	Service string `json:"Service"`
	CSR     string `json:"CSR"`
}

// connectIntentionRequest is the body of POST /v1/rpc/connect/intentions:
// Op "upsert" takes Intention and Replace, "delete" Source and
// Destination, "delete-by-id" ID.
type connectIntentionRequest struct {
	Op          string               `json:"Op"`
	Intention   *intention.Intention `json:"Intention,omitempty"`
	Replace     bool                 `json:"Replace,omitempty"`
	Source      string               `json:"Source,omitempty"`
	Destination string               `json:"Destination,omitempty"`
	ID          string               `json:"ID,omitempty"`
}

// connectIntentionResponse is the intention written or removed and the
// index of the state the write produced.
type connectIntentionResponse struct {
	Intention intention.Intention `json:"Intention"`
	Index     uint64              `json:"Index"`
}

// connectRoutes adds the mesh calls to mux.
func (s *Server) connectRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+pathConnectWatch, s.handleConnectWatch)
	mux.HandleFunc("PUT "+pathConnectAlloc+"{alloc_id}", s.handleConnectPutAlloc)
	mux.HandleFunc("DELETE "+pathConnectAlloc+"{alloc_id}", s.handleConnectDeleteAlloc)
	mux.HandleFunc("POST "+pathConnectSign, s.handleConnectSign)
	mux.HandleFunc("POST "+pathConnectIntentions, s.handleConnectIntentions)
	mux.HandleFunc("GET "+pathConnectRoots, s.handleConnectRoots)
	mux.HandleFunc("POST "+pathConnectCARotate, s.handleConnectCARotate)
	mux.HandleFunc("POST "+pathConnectConfig, s.handleConnectConfig)
	mux.HandleFunc("POST "+pathConnectExternal, s.handleConnectExternal)
}

// handleConnectRoots answers the CA's public roots to any peer the TLS
// layer admitted (a client or server certificate): no node identity, as a
// client agent builds its control plane before its node registers.
func (s *Server) handleConnectRoots(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Connect == nil {
		writeError(w, http.StatusNotFound, codeConnectNotServed, "%v by this server", ErrConnectNotServed)
		return
	}
	roots, err := s.cfg.Connect.Roots(r.Context())
	if err != nil {
		s.backendError(w, r, false, err)
		return
	}
	writeJSON(w, roots)
}

// connectNode answers 404 when no mesh calls are served, authenticates
// the calling node and returns the backend and the node's ID.
func (s *Server) connectNode(w http.ResponseWriter, r *http.Request) (ConnectBackend, string, bool) {
	if s.cfg.Connect == nil {
		writeError(w, http.StatusNotFound, codeConnectNotServed, "%v by this server", ErrConnectNotServed)
		return nil, "", false
	}
	id, ok := s.authNode(w, r)
	if !ok {
		return nil, "", false
	}
	return s.cfg.Connect, id, true
}

// allocInstancePrefix starts the ID of every instance of allocation
// allocID (connect.ServiceID, connect.TaskServiceID and their proxies'
// IDs): instance IDs key every agent's catalog across nodes, so a node
// registering an ID outside its allocation's would replace another node's
// instance in every mirror, that node's own catalog included.
func allocInstancePrefix(allocID string) string {
	return catalog.ReservedIDPrefix + "task-" + allocID + "-"
}

// allocIDParam is the path's allocation ID, answering 400 for one that
// cannot be a key segment.
func allocIDParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("alloc_id")
	if id == "" || len(id) > maxAllocIDLen || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		writeError(w, http.StatusBadRequest, "", "%v: allocation ID must be 1 to %d bytes without '/'", ErrBadRequest, maxAllocIDLen)
		return "", false
	}
	return id, true
}

// handleConnectPutAlloc registers the services of an allocation placed on
// the calling node; every instance must name the node and the allocation,
// and carry an ID of the allocation (allocInstancePrefix).
func (s *Server) handleConnectPutAlloc(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	allocID, ok := allocIDParam(w, r)
	if !ok {
		return
	}
	var req connectAllocRequest
	if !decodeBody(w, r, &req) {
		return
	}
	for _, in := range req.Instances {
		if in.NodeID != nodeID || in.AllocID != allocID {
			s.logger.Warn("refused registration naming another node or allocation", "node_id", nodeID, "alloc_id", allocID,
				"instance_node_id", in.NodeID, "instance_alloc_id", in.AllocID, "service", in.Name)
			writeError(w, http.StatusForbidden, "", "%v: instance %q must name node %s and allocation %s (it names node %q, allocation %q)",
				ErrForbidden, in.ID, nodeID, allocID, in.NodeID, in.AllocID)
			return
		}
	}
	for _, in := range req.Instances {
		if !strings.HasPrefix(in.ID, allocInstancePrefix(allocID)) {
			s.logger.Warn("refused registration under an ID outside the allocation", "node_id", nodeID, "alloc_id", allocID,
				"service_id", in.ID, "service", in.Name)
			writeError(w, http.StatusForbidden, "", "%v: instance ID %q of allocation %s must start with %q",
				ErrForbidden, in.ID, allocID, allocInstancePrefix(allocID))
			return
		}
	}
	alloc, err := s.cfg.Backend.Alloc(r.Context(), allocID)
	if err != nil {
		s.backendError(w, r, false, err)
		return
	}
	if alloc == nil || alloc.NodeID != nodeID {
		s.logger.Warn("refused registration of an allocation not placed on the node", "node_id", nodeID, "alloc_id", allocID)
		writeError(w, http.StatusForbidden, "", "%v: allocation %s is not placed on node %s", ErrForbidden, allocID, nodeID)
		return
	}
	if len(req.Instances) > 0 && stopping(alloc) {
		s.logger.Warn("refused registration of a stopped allocation", "node_id", nodeID, "alloc_id", allocID,
			"client_status", alloc.ClientStatus, "desired_status", alloc.DesiredStatus)
		writeError(w, http.StatusForbidden, "", "%v: allocation %s is stopped or stopping (client status %q, desired status %q)",
			ErrForbidden, allocID, alloc.ClientStatus, alloc.DesiredStatus)
		return
	}
	if name, ok := undeclared(alloc, req.Instances); !ok {
		s.logger.Warn("refused registration of a service the allocation does not declare", "node_id", nodeID, "alloc_id", allocID, "service", name)
		writeError(w, http.StatusForbidden, "", "%v: allocation %s declares no service %q", ErrForbidden, allocID, name)
		return
	}
	if err := cb.PutAlloc(r.Context(), nodeID, allocID, req.Instances); err != nil {
		s.backendError(w, r, false, err)
		return
	}
	writeJSON(w, struct{}{})
}

// handleConnectDeleteAlloc removes the registrations of an allocation
// under the calling node's own key; the allocation may be gone already.
func (s *Server) handleConnectDeleteAlloc(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	allocID, ok := allocIDParam(w, r)
	if !ok {
		return
	}
	if err := cb.DeleteAlloc(r.Context(), nodeID, allocID); err != nil {
		s.backendError(w, r, false, err)
		return
	}
	writeJSON(w, struct{}{})
}

// handleConnectSign signs a leaf CSR for a service one of the calling
// node's running allocations declares.
func (s *Server) handleConnectSign(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	var req connectSignRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !ca.ValidServiceName(req.Service) {
		writeError(w, http.StatusBadRequest, "", "%v: %v: %q", ErrBadRequest, ca.ErrInvalidService, req.Service)
		return
	}
	csr := parseCSR(req.CSR) // nil if it does not parse: the CA's to refuse
	if err := csrNamesOther(csr, req.Service); err != nil {
		s.logger.Warn("refused CSR naming another identity", "node_id", nodeID, "service", req.Service, "error", err)
		writeError(w, http.StatusForbidden, "", "%v", err)
		return
	}
	if err := s.csrOtherDatacenter(r.Context(), nodeID, csr); err != nil {
		if !errors.Is(err, ErrForbidden) {
			s.backendError(w, r, false, err)
			return
		}
		s.logger.Warn("refused CSR for another datacenter", "node_id", nodeID, "service", req.Service, "error", err)
		writeError(w, http.StatusForbidden, "", "%v", err)
		return
	}
	runs, err := s.nodeRunsService(r.Context(), nodeID, req.Service)
	if err != nil {
		s.backendError(w, r, false, err)
		return
	}
	if !runs {
		s.logger.Warn("refused CSR for a service the node does not run", "node_id", nodeID, "service", req.Service)
		writeError(w, http.StatusForbidden, "", "%v: node %s runs no allocation of service %q", ErrForbidden, nodeID, req.Service)
		return
	}
	cert, err := cb.SignCSR(r.Context(), req.Service, req.CSR)
	switch {
	case errors.Is(err, ca.ErrInvalidCSR) || errors.Is(err, ca.ErrInvalidService) || errors.Is(err, ca.ErrInvalidSpiffeID):
		// The CSR itself is wrong: every server would refuse it.
		writeError(w, http.StatusBadRequest, "", "%v: %v", ErrBadRequest, err)
		return
	case err != nil:
		s.backendError(w, r, false, err)
		return
	}
	s.logger.Debug("signed leaf CSR", "node_id", nodeID, "service", req.Service, "root_id", cert.RootID)
	writeJSON(w, cert)
}

// parseCSR parses a PEM CSR once for the checks below; nil when it does
// not parse (the CA refuses it with ca.ErrInvalidCSR, answered 400).
func parseCSR(csrPEM string) *x509.CertificateRequest {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil {
		return nil
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil
	}
	return csr
}

// csrNamesOther refuses (ErrForbidden) a CSR whose URI SAN is the
// identity of another service than the one it is signed for: a node
// asking for someone else's identity, which the servers log. Everything
// else about the CSR (PEM, signature, key type, the number of URI SANs,
// the trust domain) is the CA's to check; a CSR that did not parse (nil)
// is left to it.
func csrNamesOther(csr *x509.CertificateRequest, service string) error {
	if csr == nil {
		return nil
	}
	for _, u := range csr.URIs {
		if id, err := ca.ParseSpiffeID(u.String()); err == nil && id.Service != service {
			return fmt.Errorf("%w: the CSR names service %q, not %q", ErrForbidden, id.Service, service)
		}
	}
	return nil
}

// nodeRunsService reports whether one of the node's allocations that may
// still run declares service (a group or a task service), or runs a
// terminating gateway that links it (in its job's block or in the
// gateway's terminating-gateway config entry).
func (s *Server) nodeRunsService(ctx context.Context, nodeID, service string) (bool, error) {
	allocs, err := s.cfg.Backend.AllocsOnNode(ctx, nodeID)
	if err != nil {
		return false, err
	}
	groups := liveGroups(allocs)
	if groupsDeclare(groups, service) {
		return true, nil
	}
	return s.entryLinks(ctx, terminatingGateways(groups), service)
}

// liveGroups are the task groups of allocs that may still run.
func liveGroups(allocs []*structs.Allocation) []*structs.TaskGroup {
	var out []*structs.TaskGroup
	for _, a := range allocs {
		if a == nil || a.Job == nil || stopping(a) {
			continue
		}
		if tg := a.Job.LookupTaskGroup(a.TaskGroup); tg != nil {
			out = append(out, tg)
		}
	}
	return out
}

// groupsDeclare reports whether one of groups declares service, or links
// it in a terminating gateway block.
func groupsDeclare(groups []*structs.TaskGroup, service string) bool {
	for _, tg := range groups {
		if declares(tg.Services, service) || linksService(tg.Services, service) {
			return true
		}
		for _, t := range tg.Tasks {
			if t != nil && declares(t.Services, service) {
				return true
			}
		}
	}
	return false
}

// stopping reports whether an allocation is terminal or told to stop: its
// services may not be registered nor leaves signed for them.
func stopping(a *structs.Allocation) bool {
	return a.TerminalStatus() || a.DesiredStatus == structs.AllocDesiredStatusStop
}

// undeclared returns the first instance name the allocation's group does
// not declare; ok is true when every instance is declared. A plain
// instance must be a service the group declares (group or task service).
// A connect-proxy instance must front one (Proxy.DestinationServiceName,
// which is how EDS picks a service's proxies) and carry its sidecar's
// name: a proxy named after its own service but fronting another would
// draw that service's traffic. An allocation whose job is unknown (not
// hydrated) is not checked.
func undeclared(a *structs.Allocation, insts []catalog.ServiceInstance) (name string, ok bool) {
	if a.Job == nil {
		return "", true
	}
	tg := a.Job.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		if len(insts) > 0 {
			return insts[0].Name, false
		}
		return "", true
	}
	services := append([]*structs.Service(nil), tg.Services...)
	for _, t := range tg.Tasks {
		if t != nil {
			services = append(services, t.Services...)
		}
	}
	for _, in := range insts {
		if in.Kind != catalog.KindConnectProxy {
			if !declares(services, in.Name) {
				return in.Name, false
			}
			continue
		}
		if in.Proxy == nil {
			return in.Name, false
		}
		dest := in.Proxy.DestinationServiceName
		if !declares(services, dest) || in.Name != connect.ProxyServiceName(dest) {
			return in.Name, false
		}
	}
	return "", true
}

// linksService reports whether one of services is a terminating gateway
// whose block links name: the gateway presents that service's leaf.
func linksService(services []*structs.Service, name string) bool {
	for _, svc := range services {
		if svc == nil || !svc.Connect.IsTerminating() {
			continue
		}
		for _, ls := range svc.Connect.Gateway.Terminating.Services {
			if ls != nil && ls.Name == name {
				return true
			}
		}
	}
	return false
}

func declares(services []*structs.Service, name string) bool {
	for _, svc := range services {
		if svc != nil && svc.Name == name {
			return true
		}
	}
	return false
}
