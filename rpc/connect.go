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
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/structs"
)

// ConnectBackend is the mesh state a server serves to client agents (the
// servers' etcd store, package meshstate). Its writes compare-and-swap
// from any server: none needs the leader.
type ConnectBackend interface {
	// Follow streams the mesh feed (a Reset batch, then changes) until ctx
	// ends or fn returns an error.
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
// the calling node; every instance must name the node and the allocation.
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
	if status, err := checkCSR(req.CSR, req.Service); err != nil {
		if status == http.StatusForbidden {
			s.logger.Warn("refused CSR naming another identity", "node_id", nodeID, "service", req.Service, "error", err)
		}
		writeError(w, status, "", "%v", err)
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
	case errors.Is(err, ca.ErrInvalidService) || errors.Is(err, ca.ErrInvalidSpiffeID):
		writeError(w, http.StatusBadRequest, "", "%v: %v", ErrBadRequest, err)
		return
	case err != nil:
		s.backendError(w, r, false, err)
		return
	}
	s.logger.Debug("signed leaf CSR", "node_id", nodeID, "service", req.Service, "root_id", cert.RootID)
	writeJSON(w, cert)
}

// checkCSR parses csrPEM and checks its signature (400 otherwise); a URI
// SAN it carries must be service's SPIFFE ID (403 otherwise), so that a
// CA signing what the CSR asks for cannot be led to another identity.
func checkCSR(csrPEM, service string) (int, error) {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return http.StatusBadRequest, fmt.Errorf("%w: CSR must be a PEM \"CERTIFICATE REQUEST\"", ErrBadRequest)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("%w: invalid CSR: %w", ErrBadRequest, err)
	}
	for _, u := range csr.URIs {
		id, err := ca.ParseSpiffeID(u.String())
		if err != nil || id.Service != service {
			return http.StatusForbidden, fmt.Errorf("%w: the CSR names %s, not service %q", ErrForbidden, u, service)
		}
	}
	return 0, nil
}

// nodeRunsService reports whether one of the node's allocations that may
// still run declares service (a group or a task service).
func (s *Server) nodeRunsService(ctx context.Context, nodeID, service string) (bool, error) {
	allocs, _, err := s.cfg.Backend.NodeAllocs(ctx, nodeID, 0)
	if err != nil {
		return false, err
	}
	for _, a := range allocs {
		if a == nil || a.Job == nil || a.TerminalStatus() || a.DesiredStatus == structs.AllocDesiredStatusStop {
			continue
		}
		tg := a.Job.LookupTaskGroup(a.TaskGroup)
		if tg == nil {
			continue
		}
		if declares(tg.Services, service) {
			return true, nil
		}
		for _, t := range tg.Tasks {
			if t != nil && declares(t.Services, service) {
				return true, nil
			}
		}
	}
	return false, nil
}

// undeclared returns the first instance name that is neither a service
// the allocation's group declares (group or task service) nor the sidecar
// proxy of one; ok is true when every name is declared. An allocation
// whose job is unknown (not hydrated) is not checked.
func undeclared(a *structs.Allocation, insts []catalog.ServiceInstance) (name string, ok bool) {
	if a.Job == nil {
		return "", true
	}
	tg := a.Job.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		return "", len(insts) == 0
	}
	services := append([]*structs.Service(nil), tg.Services...)
	for _, t := range tg.Tasks {
		if t != nil {
			services = append(services, t.Services...)
		}
	}
	for _, in := range insts {
		base, proxy := strings.CutSuffix(in.Name, "-sidecar-proxy")
		if !declares(services, in.Name) && !(proxy && declares(services, base)) {
			return in.Name, false
		}
	}
	return "", true
}

func declares(services []*structs.Service, name string) bool {
	for _, svc := range services {
		if svc != nil && svc.Name == name {
			return true
		}
	}
	return false
}

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
	case req.Op == intentionOpDelete && req.Source != "" && req.Destination != "":
		out.Intention, out.Index, err = iw.Delete(ctx, req.Source, req.Destination)
	case req.Op == intentionOpDeleteByID && req.ID != "":
		out.Intention, out.Index, err = iw.DeleteByID(ctx, req.ID)
	case req.Op == intentionOpUpsert:
		malfo = "upsert needs an Intention"
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
