package consulapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
)

// CatalogWriter stores registrations of services outside the mesh, each
// as an allocation (inst.AllocID) of a node named
// catalog.ExternalNodePrefix+<node> (inst.NodeID): the servers' store
// (meshstate.Store) on a server agent, a call through a server (package
// rpc, with the caller's token) on a client agent, so that they persist
// and reach every agent's catalog through the mesh state feed. To delete,
// inst also carries the service's Name when this agent knows it.
//
// DeleteExternal's pre, when non-nil, judges the instances the delete is
// about to remove on the state the delete changes (inside its
// compare-and-swap), not on this agent's copy, which may not hold them
// yet; its error fails the delete, unchanged. A writer that forwards to a
// server does not send pre: the server judges the caller's token, which
// ctx carries, on its own state.
type CatalogWriter interface {
	PutExternal(ctx context.Context, inst catalog.ServiceInstance) error
	DeleteExternal(ctx context.Context, inst catalog.ServiceInstance, pre func(stored []catalog.ServiceInstance) error) error
}

// ErrCatalogWriteUnsupported: this agent cannot store catalog
// registrations (a client-only agent: register through a server's API).
var ErrCatalogWriteUnsupported = errors.New("catalog registration is not supported by this agent")

// registerBody is Consul's /v1/catalog/register request (the fields
// meshlet keeps).
type registerBody struct {
	Node       string
	Address    string
	Datacenter string
	Service    *consul.AgentService
	Checks     consul.HealthChecks
	Check      *consul.AgentCheck
}

// catalogRegister registers a service instance outside the mesh (no
// sidecar), as Consul's PUT /v1/catalog/register: a terminating gateway
// forwards to it. It answers true, as Consul does.
func (s *Server) catalogRegister(w http.ResponseWriter, r *http.Request) {
	var body registerBody
	if err := decodeBody(r, &body); err != nil {
		s.failFor(w, r, err)
		return
	}
	inst, err := s.externalInstance(body)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	if cur, ok := s.d.Catalog.Get(inst.ID); ok && cur.NodeID != inst.NodeID {
		s.failFor(w, r, idTaken(inst.ID, cur))
		return
	}
	ctx := acl.ContextWithSecret(r.Context(), requestSecret(r))
	if err := s.putExternal(ctx, inst); err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, s.d.Catalog.Index(), true)
}

func idTaken(id string, cur catalog.ServiceInstance) error {
	node := strings.TrimPrefix(cur.NodeID, catalog.ExternalNodePrefix)
	if !strings.HasPrefix(cur.NodeID, catalog.ExternalNodePrefix) {
		node = cur.NodeName + " (a mesh instance)"
	}
	return catalog.IDTakenBy(id, node)
}

// catalogDeregister removes one instance registered through
// catalogRegister (Node and ServiceID), as Consul's PUT
// /v1/catalog/deregister.
func (s *Server) catalogDeregister(w http.ResponseWriter, r *http.Request) {
	var body struct{ Node, ServiceID, CheckID, Datacenter string }
	if err := decodeBody(r, &body); err != nil {
		s.failFor(w, r, err)
		return
	}
	if err := checkExternalIDs(body.Node, body.ServiceID); err != nil {
		s.failFor(w, r, err)
		return
	}
	inst := catalog.ServiceInstance{ID: body.ServiceID, NodeID: catalog.ExternalNodePrefix + body.Node, AllocID: externalAllocID(body.ServiceID)}
	if old, ok := s.d.Catalog.Get(body.ServiceID); ok && old.NodeID == inst.NodeID {
		inst.Name = old.Name
	}
	ctx := acl.ContextWithSecret(r.Context(), requestSecret(r))
	if err := s.deleteExternal(ctx, inst, externalDeletePre(r)); err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, s.d.Catalog.Index(), true)
}

func checkExternalIDs(node, serviceID string) error {
	switch {
	case node == "":
		return badRequest("missing node name")
	case serviceID == "":
		return badRequest("missing service ID (meshlet registers and deregisters one service at a time)")
	case strings.ContainsAny(node+serviceID, "/\x00"):
		return badRequest("node name and service ID may not contain '/'")
	}
	return nil
}

func externalAllocID(serviceID string) string { return "svc-" + serviceID }

// externalInstance is the catalog instance of a registration: the
// service's address (else the node's), healthy unless a check is critical.
func (s *Server) externalInstance(b registerBody) (catalog.ServiceInstance, error) {
	if b.Service == nil || b.Service.Service == "" {
		return catalog.ServiceInstance{}, badRequest("missing service (meshlet's catalog holds services, not bare nodes)")
	}
	if b.Datacenter != "" && b.Datacenter != s.d.Datacenter {
		return catalog.ServiceInstance{}, badRequest("datacenter %q is not this one (%q)", b.Datacenter, s.d.Datacenter)
	}
	if b.Service.Kind != "" && b.Service.Kind != consul.ServiceKindTypical {
		return catalog.ServiceInstance{}, badRequest("service kind %q cannot be registered through the catalog; proxies and gateways come from jobs", b.Service.Kind)
	}
	id := b.Service.ID
	if id == "" {
		id = b.Service.Service
	}
	if err := checkExternalIDs(b.Node, id); err != nil {
		return catalog.ServiceInstance{}, err
	}
	if err := catalog.CheckExternalID(id); err != nil {
		return catalog.ServiceInstance{}, err
	}
	addr := b.Service.Address
	if addr == "" {
		addr = b.Address
	}
	if net.ParseIP(addr) == nil {
		return catalog.ServiceInstance{}, badRequest("service address %q is not an IP address", addr)
	}
	if b.Service.Port < 1 || b.Service.Port > 65535 {
		return catalog.ServiceInstance{}, badRequest("service port %d is out of range 1-65535", b.Service.Port)
	}
	checks := b.Checks
	if b.Check != nil {
		checks = append(checks, &consul.HealthCheck{CheckID: b.Check.CheckID, Name: b.Check.Name, Status: b.Check.Status, ServiceID: b.Check.ServiceID})
	}
	var cs []catalog.Check
	for _, c := range checks {
		if c != nil && (c.ServiceID == "" || c.ServiceID == id) {
			cs = append(cs, catalog.Check{ID: c.CheckID, Name: c.Name, Type: c.Type, Status: c.Status, Output: c.Output})
		}
	}
	return catalog.ServiceInstance{
		ID: id, Name: b.Service.Service, Address: addr, Port: b.Service.Port, Tags: b.Service.Tags, Meta: b.Service.Meta,
		NodeID: catalog.ExternalNodePrefix + b.Node, NodeName: b.Node, NodeAddress: b.Address, AllocID: externalAllocID(id),
		Datacenter: s.d.Datacenter, Checks: cs, Healthy: catalog.HealthyChecks(cs),
	}, nil
}

// putExternal stores an external instance: through the CatalogWriter,
// else into a lone control plane's catalog.
func (s *Server) putExternal(ctx context.Context, inst catalog.ServiceInstance) error {
	if s.d.CatalogWriter != nil {
		return s.d.CatalogWriter.PutExternal(ctx, inst)
	}
	c, ok := s.d.Catalog.(*catalog.Catalog)
	if !ok {
		return ErrCatalogWriteUnsupported
	}
	if cur, ok := c.Get(inst.ID); ok && cur.NodeID != inst.NodeID {
		return idTaken(inst.ID, cur)
	}
	c.Register(inst)
	return nil
}

// deleteExternal removes an external instance, if pre allows the one
// removed: through the CatalogWriter, else from a lone control plane's
// catalog.
func (s *Server) deleteExternal(ctx context.Context, inst catalog.ServiceInstance, pre func([]catalog.ServiceInstance) error) error {
	if s.d.CatalogWriter != nil {
		return s.d.CatalogWriter.DeleteExternal(ctx, inst, pre)
	}
	c, ok := s.d.Catalog.(*catalog.Catalog)
	if !ok {
		return ErrCatalogWriteUnsupported
	}
	if old, ok := c.Get(inst.ID); ok && old.NodeID == inst.NodeID {
		if pre != nil {
			if err := pre([]catalog.ServiceInstance{old}); err != nil {
				return err
			}
		}
		c.DeregisterAlloc(old.AllocID)
	}
	return nil
}

// externalDeletePre is the precondition of a catalog deregistration with
// ACLs: the caller's token must allow service write on every service the
// store removes. The store judges it on the registration it deletes, not
// on this agent's copy, which may not hold it yet (the rule,
// allowCatalogDeregister, lets an ID this copy does not know through with
// node write alone). Without ACLs it is nil.
func externalDeletePre(r *http.Request) func([]catalog.ServiceInstance) error {
	id, ok := r.Context().Value(identityKey{}).(identity)
	if !ok {
		return nil
	}
	return func(stored []catalog.ServiceInstance) error {
		for _, in := range stored {
			if !id.authz.AllowServiceWrite(in.Name) {
				return acl.ErrPermissionDenied
			}
		}
		return nil
	}
}

// allowCatalogRegister is Consul's rule (vetRegisterWithACL): node write,
// service write on the service registered and, when the registration
// replaces an instance of another service, service write on that one too.
func allowCatalogRegister(s *Server, a authorizer, r *http.Request) (bool, error) {
	var body registerBody
	if err := peekBody(r, &body); err != nil {
		return false, err
	}
	if body.Service == nil {
		return a.AllowNodeWrite(), nil
	}
	if !a.AllowNodeWrite() || !a.AllowServiceWrite(body.Service.Service) {
		return false, nil
	}
	id := body.Service.ID
	if id == "" {
		id = body.Service.Service
	}
	if cur, ok := s.d.Catalog.Get(id); ok && cur.Name != body.Service.Service {
		return a.AllowServiceWrite(cur.Name), nil
	}
	return true, nil
}

// allowCatalogDeregister: node write, and service write on the service
// the instance belongs to (when it is known here; the store judges it
// again on what it deletes, externalDeletePre).
func allowCatalogDeregister(s *Server, a authorizer, r *http.Request) (bool, error) {
	var body struct{ Node, ServiceID string }
	if err := peekBody(r, &body); err != nil {
		return false, err
	}
	if !a.AllowNodeWrite() {
		return false, nil
	}
	if inst, ok := s.d.Catalog.Get(body.ServiceID); ok {
		return a.AllowServiceWrite(inst.Name), nil
	}
	return true, nil
}
