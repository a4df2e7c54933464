package consulapi

import (
	"net/http"
	"slices"
	"strconv"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/httpsrv"
)

func (s *Server) catalogWait(r *http.Request) error {
	return s.block(r, s.d.Catalog.Index, func(fn func()) func() {
		return s.d.Catalog.Subscribe(func(catalog.Change) { fn() })
	})
}

// GET /v1/catalog/services: service name → tags. A ?filter= applies to
// each instance as on /v1/catalog/service/{name} (Consul's ServiceNode
// fields); the answer has the services with a matching instance and those
// instances' tags.
func (s *Server) catalogServices(w http.ResponseWriter, r *http.Request) {
	if err := s.catalogWait(r); err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Catalog.Index()
	if !r.URL.Query().Has("filter") {
		s.writeJSON(w, r, index, s.d.Catalog.Services())
		return
	}
	var all []catalogService
	for name := range s.d.Catalog.Services() {
		for _, inst := range s.d.Catalog.Service(name) {
			all = append(all, s.catalogEntry(inst))
		}
	}
	v, err := httpsrv.FilterAnswer(r, all)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	out := map[string][]string{}
	for _, e := range v.([]catalogService) {
		tags := out[e.ServiceName]
		if tags == nil {
			tags = []string{}
		}
		for _, t := range e.ServiceTags {
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
		slices.Sort(tags)
		out[e.ServiceName] = tags
	}
	s.writeAnswer(w, index, out)
}

// GET /v1/catalog/service/{name}[?tag=]: the instances of a service.
func (s *Server) catalogService(w http.ResponseWriter, r *http.Request) {
	if err := s.catalogWait(r); err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Catalog.Index()
	out := []catalogService{}
	for _, inst := range filterTags(s.d.Catalog.Service(r.PathValue("name")), r.URL.Query()["tag"]) {
		out = append(out, s.catalogEntry(inst))
	}
	s.writeJSON(w, r, index, out)
}

// catalogEntry is inst as one entry of /v1/catalog/service/{name}.
func (s *Server) catalogEntry(inst catalog.ServiceInstance) catalogService {
	node, addr := s.nodeOf(inst)
	return catalogService{ServiceKind: inst.Kind, CatalogService: consul.CatalogService{
		ID:                       inst.NodeID,
		Node:                     node,
		Address:                  addr,
		Datacenter:               s.d.Datacenter,
		TaggedAddresses:          map[string]string{"lan": addr},
		NodeMeta:                 map[string]string{},
		ServiceID:                inst.ID,
		ServiceName:              inst.Name,
		ServiceAddress:           inst.Address,
		ServiceTags:              nonNil(inst.Tags),
		ServiceMeta:              nonNilMap(inst.Meta),
		ServicePort:              inst.Port,
		ServiceWeights:           consul.Weights{Passing: 1, Warning: 1},
		ServiceProxy:             proxyConfig(kindProxy(inst)),
		ServiceTaggedAddresses:   serviceTagged(inst),
		CreateIndex:              inst.ModifyIndex,
		ModifyIndex:              inst.ModifyIndex,
		ServiceEnableTagOverride: false,
	}}
}

// catalogService is Consul's /v1/catalog/service answer: the api type
// plus ServiceKind ("" for a typical service), which the api type lacks.
type catalogService struct {
	consul.CatalogService
	ServiceKind string
}

// GET /v1/health/service/{name}[?passing&tag=]: the instances of a service
// with their checks; ?passing keeps those whose every check passes.
func (s *Server) healthService(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, s.d.Catalog.Service)
}

// GET /v1/health/connect/{name}[?passing&tag=]: the connect-capable
// endpoints of a service, i.e. the sidecar proxies whose destination it is.
// (Native connect services are not distinguished in the catalog and are
// not listed.)
func (s *Server) healthConnect(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, s.d.Catalog.ConnectProxies)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, list func(string) []catalog.ServiceInstance) {
	passingOnly, err := passingParam(r)
	if err == nil {
		err = s.catalogWait(r)
	}
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Catalog.Index()
	out := []consul.ServiceEntry{}
	for _, inst := range filterTags(list(r.PathValue("name")), r.URL.Query()["tag"]) {
		e := s.serviceEntry(inst)
		// Consul's ?passing: every check passing (a warning is not).
		if passingOnly && e.Checks.AggregatedStatus() != consul.HealthPassing {
			continue
		}
		out = append(out, e)
	}
	s.writeJSON(w, r, index, out)
}

// passingParam reads ?passing as Consul does: present and empty, or a
// true boolean, filters; false does not; anything else is a bad request.
func passingParam(r *http.Request) (bool, error) {
	v, ok := r.URL.Query()[consul.HealthPassing]
	if !ok || v[0] == "" {
		return ok, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil {
		return false, badRequest("invalid value for ?passing: %q", v[0])
	}
	return b, nil
}

func (s *Server) serviceEntry(inst catalog.ServiceInstance) consul.ServiceEntry {
	status, output := consul.HealthPassing, "instance is healthy"
	if !inst.Healthy {
		status, output = consul.HealthCritical, "instance is not healthy"
	}
	node, addr := s.nodeOf(inst)
	return consul.ServiceEntry{
		Node: &consul.Node{
			ID:              inst.NodeID,
			Node:            node,
			Address:         addr,
			Datacenter:      s.d.Datacenter,
			TaggedAddresses: map[string]string{"lan": addr},
			Meta:            map[string]string{},
		},
		Service: &consul.AgentService{
			Kind:        consul.ServiceKind(inst.Kind),
			ID:          inst.ID,
			Service:     inst.Name,
			Tags:        nonNil(inst.Tags),
			Meta:        nonNilMap(inst.Meta),
			Port:        inst.Port,
			Address:     inst.Address,
			Weights:     consul.AgentWeights{Passing: 1, Warning: 1},
			CreateIndex: inst.ModifyIndex,
			ModifyIndex: inst.ModifyIndex,
			Proxy:       proxyConfig(kindProxy(inst)),
			Datacenter:  s.d.Datacenter,
			// A mesh gateway's lan and wan addresses (Consul's shape).
			TaggedAddresses: serviceTagged(inst),
		},
		Checks: append(consul.HealthChecks{
			{Node: node, CheckID: "serfHealth", Name: "Serf Health Status", Status: consul.HealthPassing, Output: "Agent alive and reachable", Type: "", ServiceTags: []string{}},
		}, serviceChecks(node, inst, status, output)...),
	}
}

// serviceChecks are an instance's health checks as the client agent last
// ran them; an instance without checks has one synthetic check carrying
// its health.
func serviceChecks(node string, inst catalog.ServiceInstance, status, output string) consul.HealthChecks {
	if len(inst.Checks) == 0 {
		return consul.HealthChecks{{
			Node: node, CheckID: "service:" + inst.ID, Name: "Service '" + inst.Name + "' check",
			Status: status, Output: output, ServiceID: inst.ID, ServiceName: inst.Name, ServiceTags: nonNil(inst.Tags),
			Type: "meshlet", CreateIndex: inst.ModifyIndex, ModifyIndex: inst.ModifyIndex,
		}}
	}
	out := make(consul.HealthChecks, 0, len(inst.Checks))
	for _, c := range inst.Checks {
		out = append(out, &consul.HealthCheck{
			Node: node, CheckID: c.ID, Name: c.Name, Status: c.Status, Output: c.Output, ServiceID: inst.ID,
			ServiceName: inst.Name, ServiceTags: nonNil(inst.Tags), Type: c.Type,
			CreateIndex: inst.ModifyIndex, ModifyIndex: inst.ModifyIndex,
		})
	}
	return out
}

// nodeOf is the name and address of the node running inst: its own in a
// cluster, this agent's otherwise.
func (s *Server) nodeOf(inst catalog.ServiceInstance) (name, addr string) {
	name, addr = s.d.NodeName, s.d.NodeAddress
	if inst.NodeName != "" {
		name = inst.NodeName
	}
	if inst.NodeAddress != "" {
		addr = inst.NodeAddress
	}
	return name, addr
}

func proxyConfig(p *catalog.Proxy) *consul.AgentServiceConnectProxyConfig {
	if p == nil {
		return nil
	}
	out := &consul.AgentServiceConnectProxyConfig{
		DestinationServiceName: p.DestinationServiceName,
		DestinationServiceID:   p.DestinationServiceID,
		LocalServiceAddress:    p.LocalServiceAddress,
		LocalServicePort:       p.LocalServicePort,
		Config:                 p.Config,
	}
	for _, u := range p.Upstreams {
		out.Upstreams = append(out.Upstreams, consul.Upstream{
			DestinationType:  consul.UpstreamDestTypeService,
			DestinationName:  u.DestinationName,
			Datacenter:       u.Datacenter,
			LocalBindAddress: u.LocalBindAddress,
			LocalBindPort:    u.LocalBindPort,
			Config:           u.Config,
		})
	}
	for _, e := range p.Expose {
		out.Expose.Paths = append(out.Expose.Paths, consul.ExposePath{
			ListenerPort: e.ListenerPort, Path: e.Path, LocalPathPort: e.LocalPathPort, Protocol: e.Protocol,
		})
	}
	return out
}

// filterTags keeps the instances that carry every tag in tags.
func filterTags(in []catalog.ServiceInstance, tags []string) []catalog.ServiceInstance {
	if len(tags) == 0 {
		return in
	}
	var out []catalog.ServiceInstance
	for _, inst := range in {
		if hasAll(inst.Tags, tags) {
			out = append(out, inst)
		}
	}
	return out
}

func hasAll(have, want []string) bool {
	set := make(map[string]bool, len(have))
	for _, t := range have {
		set[t] = true
	}
	for _, t := range want {
		if !set[t] {
			return false
		}
	}
	return true
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// kindProxy is the proxy block an instance shows: a gateway names no
// destination (meshlet keeps its own name there, as its identity).
func kindProxy(inst catalog.ServiceInstance) *catalog.Proxy {
	if (inst.Kind != catalog.KindIngressGateway && inst.Kind != catalog.KindTerminatingGateway && inst.Kind != catalog.KindMeshGateway) || inst.Proxy == nil {
		return inst.Proxy
	}
	p := *inst.Proxy
	p.DestinationServiceName = ""
	return &p
}

// serviceTagged is an instance's tagged addresses in Consul's shape (nil:
// none, as Consul omits them).
func serviceTagged(inst catalog.ServiceInstance) map[string]consul.ServiceAddress {
	if len(inst.TaggedAddresses) == 0 {
		return nil
	}
	out := make(map[string]consul.ServiceAddress, len(inst.TaggedAddresses))
	for k, v := range inst.TaggedAddresses {
		out[k] = consul.ServiceAddress{Address: v.Address, Port: v.Port}
	}
	return out
}
