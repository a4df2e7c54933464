package consulapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
)

// caRoot is a root in Consul's /v1/connect/ca/roots shape. It has no field
// that could carry a private key.
type caRoot struct {
	ID                  string
	Name                string
	SerialNumber        uint64
	SigningKeyID        string
	ExternalTrustDomain string
	NotBefore           time.Time
	NotAfter            time.Time
	RootCert            string
	IntermediateCerts   []string
	Active              bool
	PrivateKeyType      string
	PrivateKeyBits      int
	CreateIndex         uint64
	ModifyIndex         uint64
}

type caRootList struct {
	ActiveRootID string
	TrustDomain  string
	Roots        []caRoot
}

// leafCert is Consul's LeafCert shape.
type leafCert struct {
	SerialNumber  string
	CertPEM       string
	PrivateKeyPEM string
	Service       string
	ServiceURI    string
	ValidAfter    time.Time
	ValidBefore   time.Time
	CreateIndex   uint64
	ModifyIndex   uint64
}

func (s *Server) caWait(r *http.Request, current func() uint64) error {
	return s.block(r, current, func(fn func()) func() {
		return s.d.CA.Subscribe(func(ca.Event) { fn() })
	})
}

// rootsIndex is the roots' index: the CA's index at the last change of
// the root set (it rises when a root is dropped, which need not touch any
// remaining root), at least the highest ModifyIndex among the roots.
func rootsIndex(rs ca.Roots) uint64 {
	idx := rs.Index
	for _, r := range rs.Roots {
		idx = max(idx, r.ModifyIndex)
	}
	return idx
}

// GET /v1/connect/ca/roots and /v1/agent/connect/ca/roots.
func (s *Server) caRoots(w http.ResponseWriter, r *http.Request) {
	if err := s.caWait(r, func() uint64 { return rootsIndex(s.d.CA.Roots()) }); err != nil {
		s.failFor(w, r, err)
		return
	}
	rs := s.d.CA.Roots()
	out := caRootList{ActiveRootID: rs.ActiveRootID, TrustDomain: rs.TrustDomain, Roots: []caRoot{}}
	for _, root := range rs.Roots {
		out.Roots = append(out.Roots, caRoot{
			ID: root.ID, Name: root.Name, SerialNumber: root.SerialNumber, SigningKeyID: root.SigningKeyID,
			ExternalTrustDomain: rs.TrustDomain, NotBefore: root.NotBefore, NotAfter: root.NotAfter,
			RootCert: root.RootCertPEM, IntermediateCerts: nonNil(root.IntermediateCertsPEM), Active: root.Active,
			PrivateKeyType: "ec", PrivateKeyBits: 256, CreateIndex: root.CreateIndex, ModifyIndex: root.ModifyIndex,
		})
	}
	s.writeJSON(w, r, rootsIndex(rs), out)
}

// GET /v1/agent/connect/ca/leaf/{name}: the leaf of a service. name is a
// service name; the ID of an instance meshlet registered (not an external
// registration's, whose ID anyone with node write picks) is accepted too
// when no service has that name, and resolves to its service (a sidecar
// proxy's ID to the service it fronts). With ?index= it blocks until the
// leaf is renewed. With ACLs the service is the one allowLeaf approved.
func (s *Server) caLeaf(w http.ResponseWriter, r *http.Request) {
	service := r.PathValue(leafServiceValue)
	if service == "" {
		service = s.leafService(r.PathValue("name"))
	}
	leaf, err := s.d.CA.Leaf(r.Context(), service)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	if r.URL.Query().Get("index") != "" {
		current := func() uint64 {
			if l, err := s.d.CA.Leaf(r.Context(), service); err == nil {
				return l.ModifyIndex
			}
			return 0
		}
		if err := s.caWait(r, current); err != nil {
			s.failFor(w, r, err)
			return
		}
		if leaf, err = s.d.CA.Leaf(r.Context(), service); err != nil {
			s.failFor(w, r, err)
			return
		}
	}
	s.writeJSON(w, r, leaf.ModifyIndex, leafCert{
		SerialNumber: leaf.SerialNumber, CertPEM: leaf.CertPEM, PrivateKeyPEM: leaf.PrivateKeyPEM,
		Service: leaf.Service, ServiceURI: leaf.SpiffeID, ValidAfter: leaf.ValidAfter, ValidBefore: leaf.ValidBefore,
		CreateIndex: leaf.ModifyIndex, ModifyIndex: leaf.ModifyIndex,
	})
}

func (s *Server) leafService(name string) string {
	if s.d.Catalog == nil {
		return name
	}
	if len(s.d.Catalog.Service(name)) > 0 {
		return name
	}
	inst, ok := s.d.Catalog.Get(name)
	if !ok || strings.HasPrefix(inst.NodeID, catalog.ExternalNodePrefix) {
		return name
	}
	if inst.Kind == catalog.KindConnectProxy && inst.Proxy != nil && inst.Proxy.DestinationServiceName != "" {
		return inst.Proxy.DestinationServiceName
	}
	return inst.Name
}

// POST /v1/agent/connect/authorize: {"Target","ClientCertURI"} →
// {"Authorized","Reason"}. An L7 intention never authorizes (see below).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Target           string
		ClientCertURI    string
		ClientCertSerial string
	}
	if err := decodeBody(r, &req); err != nil {
		s.failFor(w, r, err)
		return
	}
	if req.Target == "" || req.ClientCertURI == "" {
		s.failFor(w, r, badRequest("Target and ClientCertURI are required"))
		return
	}
	d, err := s.d.Authz.Authorize(req.ClientCertURI, req.Target)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	if d.Allowed && d.Matched != nil && d.Matched.IsL7() {
		// The caller (a native connect app) asks once per connection
		// and then serves every request on it: permissions that decide
		// request by request cannot admit it (Consul denies too).
		d.Allowed = false
		d.Reason = fmt.Sprintf("denied: L7 intention %s decides each HTTP request, which a connection authorization cannot check", d.Matched)
	}
	s.writeJSON(w, r, s.d.Intentions.Index(), struct {
		Authorized bool
		Reason     string
	}{d.Allowed, d.Reason})
}
