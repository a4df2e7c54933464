// Package catalog is the control plane's service catalog: every service
// instance of a running allocation, and every connect sidecar as a proxy
// instance, in Consul's shapes and naming (a sidecar of service "web" with
// ID "_nomad-task-<alloc>-group-web-web-9090" is registered as
// "web-sidecar-proxy" with that ID plus "-sidecar-proxy").
//
// The catalog is in memory; the client re-registers its allocations on
// start. Readers get copies. Subscribers are called synchronously, in
// registration order, after every change, with the names of the services
// the change touched; they must not block (hand off to a goroutine).
// The control plane reads the catalog and never reaches into the client.
package catalog

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/meshlet/meshlet/internal/pubsub"
)

// Service kinds, as Consul names them.
const (
	KindTypical      = ""
	KindConnectProxy = "connect-proxy"
	// KindIngressGateway is an ingress gateway: a proxy served over xDS
	// (its listeners come from the ingress-gateway config entry of its
	// name), never an endpoint of another service.
	KindIngressGateway = "ingress-gateway"
	// KindTerminatingGateway is a terminating gateway: a proxy served over
	// xDS that acts for the services outside the mesh its
	// terminating-gateway config entry links (their leaves, their
	// intentions), forwarding to their catalog instances.
	KindTerminatingGateway = "terminating-gateway"
	// KindMeshGateway is a mesh gateway: a proxy served over xDS that
	// routes mTLS connections between datacenters by their SNI without
	// terminating them (its chains come from the catalog).
	KindMeshGateway = "mesh-gateway"
)

// Tagged address names of a mesh gateway, as Consul names them: the
// address its own datacenter's sidecars use, and the one other
// datacenters' gateways and sidecars use.
const (
	TaggedLAN = "lan"
	TaggedWAN = "wan"
)

// Gateway proxy config keys (Consul's, which Nomad writes into a gateway's
// registration from its proxy block): package connect writes them, the
// xDS server reads them.
const (
	CfgGatewayBindTaggedAddresses = "envoy_gateway_bind_tagged_addresses"
	CfgGatewayBindAddresses       = "envoy_gateway_bind_addresses"
	CfgGatewayNoDefaultBind       = "envoy_gateway_no_default_bind"
	CfgDNSDiscoveryType           = "envoy_dns_discovery_type"
)

// TaggedAddress is one of an instance's tagged addresses (Consul's
// ServiceAddress).
type TaggedAddress struct {
	Address string
	Port    int
}

// IsProxyKind reports whether instances of kind run a proxy that the xDS
// server serves (connect-proxy and the three gateway kinds).
func IsProxyKind(kind string) bool {
	return kind == KindConnectProxy || kind == KindIngressGateway || kind == KindTerminatingGateway || kind == KindMeshGateway
}

// ErrNotFound is returned for an unknown service ID.
var ErrNotFound = errors.New("service instance not found")

// ServiceInstance is one registered service instance.
type ServiceInstance struct {
	ID      string
	Name    string
	Kind    string
	Address string
	Port    int
	Tags    []string
	Meta    map[string]string
	// AllocID and NodeID tie the instance to the allocation that runs it.
	AllocID    string
	NodeID     string
	Datacenter string
	// NodeName and NodeAddress name the node in catalog answers ("" on a
	// lone node: the agent's own name and address).
	NodeName    string `json:",omitempty"`
	NodeAddress string `json:",omitempty"`
	// Healthy is false while an instance should receive no traffic: one
	// of its Checks is critical.
	Healthy bool
	// Checks are the instance's health checks as last run (Consul's
	// statuses: passing, warning, critical); none: always healthy.
	Checks []Check `json:",omitempty"`
	// Proxy is set for Kind == KindConnectProxy.
	Proxy *Proxy
	// Connect is true for an app service with a sidecar or native connect.
	Connect bool
	// TaggedAddresses are a mesh gateway's lan and wan addresses (none:
	// Address and Port for both).
	TaggedAddresses map[string]TaggedAddress `json:",omitempty"`
	// ModifyIndex increases with every change to the catalog.
	ModifyIndex uint64
}

// ExternalNodePrefix prefixes the node ID of instances registered through
// the Consul-shaped /v1/catalog/register (services outside the mesh, on a
// node no agent runs): "_external-<node name>". No agent's node ID has it,
// and the servers' sweep of down nodes leaves such nodes alone.
const ExternalNodePrefix = "_external-"

// ReservedIDPrefix starts the ID of every instance meshlet registers for
// a job ("_nomad-task-…", Nomad's convention); registrations of services
// outside the mesh may not use it.
const ReservedIDPrefix = "_nomad-"

// ErrIDTaken: a registration of a service outside the mesh names the ID
// of another node's instance or of a job's (ReservedIDPrefix). Consul
// scopes service IDs to their node; this catalog keys instances by ID
// alone, so a second node's instance needs its own ID.
var ErrIDTaken = errors.New("service ID taken")

// CheckExternalID refuses, with ErrIDTaken, a service ID outside the
// mesh may not take: one starting with ReservedIDPrefix. Only registering
// checks it, so a registration stored before the rule can be removed.
func CheckExternalID(id string) error {
	if strings.HasPrefix(id, ReservedIDPrefix) {
		return fmt.Errorf("%w: service ID %q: IDs starting with %q are the instances meshlet registers for jobs", ErrIDTaken, id, ReservedIDPrefix)
	}
	return nil
}

// IDTakenBy is the ErrIDTaken of a registration whose ID node's instance
// has.
func IDTakenBy(id, node string) error {
	return fmt.Errorf("%w: service ID %q is registered on node %s; give this instance its own ID", ErrIDTaken, id, node)
}

// Check is one health check of an instance and its last result.
type Check struct {
	ID     string
	Name   string
	Type   string
	Status string
	Output string `json:",omitempty"`
}

// HealthyChecks reports whether checks allow traffic: none is critical
// (warning counts as passing, as Consul's default).
func HealthyChecks(checks []Check) bool {
	for _, c := range checks {
		if c.Status == "critical" {
			return false
		}
	}
	return true
}

// Proxy is a connect-proxy instance's configuration.
type Proxy struct {
	DestinationServiceName string
	DestinationServiceID   string
	LocalServiceAddress    string
	LocalServicePort       int
	Upstreams              []Upstream
	// Config is the free-form proxy { config {} } map (protocol, escape hatches).
	Config map[string]any
	Expose []ExposePath
}

// Upstream is one upstream of a proxy.
type Upstream struct {
	DestinationName  string
	Datacenter       string
	LocalBindAddress string
	LocalBindPort    int
	Config           map[string]any
	// MeshGatewayMode is the upstream's mesh_gateway mode ("local",
	// "remote", "none"; "": the config entries decide).
	MeshGatewayMode string `json:",omitempty"`
}

// ExposePath is an HTTP path exposed through the proxy's listener.
type ExposePath struct {
	Path          string
	Protocol      string
	LocalPathPort int
	ListenerPort  int
}

// Change tells subscribers what a catalog write touched.
type Change struct {
	// Index is the catalog's index after the change.
	Index uint64
	// Services are the service names (app and proxy names) touched.
	Services []string
	// ProxyIDs are the proxy instances added, changed or removed.
	ProxyIDs []string
}

// Catalog is a concurrency-safe in-memory catalog.
type Catalog struct {
	mu        sync.RWMutex
	index     uint64
	instances map[string]*ServiceInstance
	hub       pubsub.Hub[Change]
}

// New returns an empty catalog.
//
// An empty catalog is at index 1, not 0: the Consul-shaped API reports 1
// for both (Consul never answers 0), so the first change must move the
// index past what a blocking query on the empty catalog waits on.
func New() *Catalog {
	return &Catalog{instances: map[string]*ServiceInstance{}, index: 1}
}

// Register adds or replaces an instance (by ID).
func (c *Catalog) Register(inst ServiceInstance) {
	c.mu.Lock()
	c.index++
	inst.ModifyIndex = c.index
	ch := Change{Index: c.index}
	if old, ok := c.instances[inst.ID]; ok && old.Name != inst.Name {
		ch.Services = append(ch.Services, old.Name)
	}
	cp := copyInstance(&inst)
	c.instances[inst.ID] = cp
	ch.Services = append(ch.Services, touched(cp)...)
	if IsProxyKind(cp.Kind) {
		ch.ProxyIDs = append(ch.ProxyIDs, cp.ID)
	}
	c.mu.Unlock()
	c.hub.Publish(ch)
}

// Deregister removes an instance by ID.
func (c *Catalog) Deregister(id string) error {
	c.mu.Lock()
	inst, ok := c.instances[id]
	if !ok {
		c.mu.Unlock()
		return ErrNotFound
	}
	delete(c.instances, id)
	c.index++
	ch := Change{Index: c.index, Services: touched(inst)}
	if IsProxyKind(inst.Kind) {
		ch.ProxyIDs = []string{inst.ID}
	}
	c.mu.Unlock()
	c.hub.Publish(ch)
	return nil
}

// DeregisterAlloc removes every instance of an allocation.
func (c *Catalog) DeregisterAlloc(allocID string) {
	for _, inst := range c.byAlloc(allocID) {
		_ = c.Deregister(inst.ID)
	}
}

func (c *Catalog) byAlloc(allocID string) []ServiceInstance {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []ServiceInstance
	for _, inst := range c.instances {
		if inst.AllocID == allocID {
			out = append(out, *inst)
		}
	}
	return out
}

// ByAlloc returns the instances of an allocation, sorted by ID.
func (c *Catalog) ByAlloc(allocID string) []ServiceInstance {
	return c.filter(func(i *ServiceInstance) bool { return i.AllocID == allocID })
}

// Get returns a copy of the instance with the given ID.
func (c *Catalog) Get(id string) (ServiceInstance, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	inst, ok := c.instances[id]
	if !ok {
		return ServiceInstance{}, false
	}
	return *copyInstance(inst), true
}

// Service returns the instances registered under name, sorted by ID.
func (c *Catalog) Service(name string) []ServiceInstance {
	return c.filter(func(i *ServiceInstance) bool { return i.Name == name })
}

// ConnectProxies returns the proxy instances whose destination is service,
// sorted by ID: the endpoints of that service in the mesh.
func (c *Catalog) ConnectProxies(service string) []ServiceInstance {
	return c.filter(func(i *ServiceInstance) bool {
		return i.Kind == KindConnectProxy && i.Proxy != nil && i.Proxy.DestinationServiceName == service
	})
}

// Proxies returns every proxy instance (sidecars and ingress gateways),
// sorted by ID.
func (c *Catalog) Proxies() []ServiceInstance {
	return c.filter(func(i *ServiceInstance) bool { return IsProxyKind(i.Kind) })
}

// All returns every instance, sorted by ID.
func (c *Catalog) All() []ServiceInstance {
	return c.filter(func(*ServiceInstance) bool { return true })
}

// Services returns every service name with the union of its tags.
func (c *Catalog) Services() map[string][]string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string][]string{}
	for _, inst := range c.instances {
		tags := out[inst.Name]
		for _, t := range inst.Tags {
			if !contains(tags, t) {
				tags = append(tags, t)
			}
		}
		if tags == nil {
			tags = []string{}
		}
		sort.Strings(tags)
		out[inst.Name] = tags
	}
	return out
}

// Index is the catalog's current modify index.
func (c *Catalog) Index() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.index
}

// Subscribe calls fn after every change until the returned cancel is called.
func (c *Catalog) Subscribe(fn func(Change)) (cancel func()) {
	return c.hub.Subscribe(fn)
}

func (c *Catalog) filter(keep func(*ServiceInstance) bool) []ServiceInstance {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []ServiceInstance
	for _, inst := range c.instances {
		if keep(inst) {
			out = append(out, *copyInstance(inst))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func touched(inst *ServiceInstance) []string {
	out := []string{inst.Name}
	if inst.Proxy != nil && inst.Proxy.DestinationServiceName != "" && inst.Proxy.DestinationServiceName != inst.Name {
		out = append(out, inst.Proxy.DestinationServiceName)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func copyInstance(in *ServiceInstance) *ServiceInstance {
	out := *in
	out.Tags = append([]string(nil), in.Tags...)
	out.Checks = append([]Check(nil), in.Checks...)
	if in.Meta != nil {
		out.Meta = make(map[string]string, len(in.Meta))
		for k, v := range in.Meta {
			out.Meta[k] = v
		}
	}
	out.TaggedAddresses = maps.Clone(in.TaggedAddresses)
	if in.Proxy != nil {
		p := *in.Proxy
		p.Upstreams = append([]Upstream(nil), in.Proxy.Upstreams...)
		p.Expose = append([]ExposePath(nil), in.Proxy.Expose...)
		out.Proxy = &p
	}
	return &out
}
