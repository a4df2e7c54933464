package xds

import (
	"fmt"
	"net"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// matchFunc reports whether a subset filter selects an instance
// (configentry.MatchFilter; tests inject their own).
type matchFunc func(filter string, inst catalog.ServiceInstance) (bool, error)

// claKey names one shared ClusterLoadAssignment of mesh endpoints: the
// sidecars of service in dc, narrowed to a subset, or (gateway, a mesh
// gateway mode) the mesh gateways that lead there.
type claKey struct{ service, dc, subset, gateway string }

// clusterName is the SNI-style name of the cluster and its endpoints
// (through mesh gateways, meshGatewayCLAName of it).
func (k claKey) clusterName(trustDomain string) string {
	name := subsetClusterName(k.subset, k.service, k.dc, trustDomain)
	if k.gateway != "" {
		return meshGatewayCLAName(name, k.gateway)
	}
	return name
}

// subsetClusterName is ClusterName with a "<subset>." prefix for a subset.
func subsetClusterName(subset, service, dc, trustDomain string) string {
	if subset == "" {
		return ClusterName(service, dc, trustDomain)
	}
	return subset + "." + ClusterName(service, dc, trustDomain)
}

// endpointSource is one priority of a load assignment: the healthy
// sidecars of service in dc that pass filter.
type endpointSource struct {
	service, dc, filter string
	onlyPassing         bool
	// gateway, a mesh gateway mode, replaces the sidecars by the mesh
	// gateways that lead to dc (meshGatewayInstances).
	gateway string
	// tlsMatch, a failover target's SNI when it differs from the
	// cluster's, marks its endpoints for that transport socket
	// (addSNIMatches).
	tlsMatch string
}

// endpointSpec is how one load assignment is computed: sources[0] is the
// target itself (priority 0), the rest its failover targets in order.
type endpointSpec struct {
	sources []endpointSource
}

// plain reports whether the spec is a whole service without failover,
// served exactly as before config entries.
func (s endpointSpec) plain() bool {
	return len(s.sources) == 1 && s.sources[0].filter == "" && !s.sources[0].onlyPassing && s.sources[0].gateway == ""
}

// uses reports whether the spec reads instances of service. A source
// through mesh gateways reads gateways of any name: it uses every service.
func (s endpointSpec) uses(service string) bool {
	for _, src := range s.sources {
		if src.service == service || src.gateway != "" {
			return true
		}
	}
	return false
}

func sourceOf(t *configentry.Target, dc string) endpointSource {
	if t.Datacenter != "" {
		dc = t.Datacenter
	}
	return endpointSource{service: t.Service, dc: dc, filter: t.Filter, onlyPassing: t.OnlyPassing}
}

// instanceSource gives the sidecars of a service in a datacenter, and an
// instance by ID (a sidecar's application, whose tags and meta a filter
// falls back to).
type instanceSource struct {
	sidecars func(service, dc string) []catalog.ServiceInstance
	get      func(id string) (catalog.ServiceInstance, bool)
	// gateways gives the mesh gateways of mode toward dc, at the
	// address the mode uses (nil: none).
	gateways func(mode, dc string) []catalog.ServiceInstance
	// linked reports whether a service is linked to a terminating gateway
	// (nil: none is): sidecars gives that gateway's instances, which a
	// subset's filter (about the service's own instances) does not apply
	// to; the gateway filters by the subset's SNI itself.
	linked func(service string) bool
}

// targetAssignment builds the load assignment name from spec. A plain
// spec gives exactly loadAssignment's output. With failover, every source
// is a locality of its own priority (0, 1, 2...), kept even when empty so
// that priorities do not shift. The first filter error is returned along
// with the assignment (the instance is left out).
func targetAssignment(name string, spec endpointSpec, src instanceSource, match matchFunc) (*endpoint.ClusterLoadAssignment, error) {
	if spec.plain() {
		s := spec.sources[0]
		return loadAssignment(name, s.dc, src.sidecars(s.service, s.dc)), nil
	}
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	var firstErr error
	for prio, s := range spec.sources {
		eps, err := sourceEndpoints(s, src, match)
		eps = withSNIMatch(eps, s.tlsMatch)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if len(spec.sources) == 1 && len(eps) == 0 {
			break
		}
		cla.Endpoints = append(cla.Endpoints, &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: s.dc},
			LbEndpoints:         eps,
			LoadBalancingWeight: wrapperspb.UInt32(1),
			Priority:            uint32(prio),
		})
	}
	return cla, firstErr
}

func sourceEndpoints(s endpointSource, src instanceSource, match matchFunc) ([]*endpoint.LbEndpoint, error) {
	var eps []*endpoint.LbEndpoint
	var firstErr error
	seen := map[string]bool{}
	insts := src.sidecars
	if s.gateway != "" {
		insts = func(_, dc string) []catalog.ServiceInstance {
			if src.gateways == nil {
				return nil
			}
			return src.gateways(s.gateway, dc)
		}
	}
	for _, inst := range insts(s.service, s.dc) {
		if !inst.Healthy || inst.Port <= 0 || inst.Port > 65535 || net.ParseIP(inst.Address) == nil {
			continue
		}
		if s.onlyPassing && hasWarning(inst) {
			continue
		}
		// A subset's filter is about the service's own instances: mesh
		// gateways and terminating gateways in their place route the
		// subset's SNI themselves.
		if s.filter != "" && s.gateway == "" && (src.linked == nil || !src.linked(s.service)) {
			ok, err := match(s.filter, filterView(inst, src.get))
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("subset filter %q on %s: %w", s.filter, inst.ID, err)
				}
				continue
			}
			if !ok {
				continue
			}
		}
		key := net.JoinHostPort(inst.Address, fmt.Sprint(inst.Port))
		if seen[key] {
			continue
		}
		seen[key] = true
		eps = append(eps, lbEndpoint(inst.Address, inst.Port))
	}
	return eps, firstErr
}

func hasWarning(inst catalog.ServiceInstance) bool {
	for _, c := range inst.Checks {
		if c.Status == "warning" {
			return true
		}
	}
	return false
}

// filterView is what a subset filter sees of a sidecar: its own tags and
// meta (which default to its service's), else its application's.
func filterView(inst catalog.ServiceInstance, get func(string) (catalog.ServiceInstance, bool)) catalog.ServiceInstance {
	if (len(inst.Meta) > 0 && len(inst.Tags) > 0) || inst.Proxy == nil || inst.Proxy.DestinationServiceID == "" || get == nil {
		return inst
	}
	app, ok := get(inst.Proxy.DestinationServiceID)
	if !ok {
		return inst
	}
	if len(inst.Meta) == 0 {
		inst.Meta = app.Meta
	}
	if len(inst.Tags) == 0 {
		inst.Tags = app.Tags
	}
	return inst
}
