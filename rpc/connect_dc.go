package rpc

import (
	"context"
	"crypto/x509"
	"fmt"

	"github.com/meshlet/meshlet/ca"
)

// csrOtherDatacenter refuses (ErrForbidden) a CSR whose URI SAN names a
// datacenter other than the calling node's: a node gets identities of its
// own datacenter only (a datacenter is a group of nodes of the same
// servers, and the CA signs for any of them). A CSR that did not parse
// (nil), or a node that names no datacenter, is left to the CA.
func (s *Server) csrOtherDatacenter(ctx context.Context, nodeID string, csr *x509.CertificateRequest) error {
	if csr == nil || len(csr.URIs) != 1 {
		return nil
	}
	id, err := ca.ParseSpiffeID(csr.URIs[0].String())
	if err != nil {
		return nil
	}
	node, err := s.cfg.Backend.Node(ctx, nodeID)
	if err != nil {
		return fmt.Errorf("failed to look up node %s: %w", nodeID, err)
	}
	if node == nil || node.Datacenter == "" || node.Datacenter == id.Datacenter {
		return nil
	}
	return fmt.Errorf("%w: the CSR names datacenter %q; node %s is in %q", ErrForbidden, id.Datacenter, nodeID, node.Datacenter)
}
