package sidecar

import (
	"errors"
	"fmt"
	"sort"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

// defaultConnectTimeout is Envoy's default cluster connect_timeout.
const defaultConnectTimeout = 5 * time.Second

// lbPolicy is how a cluster picks an endpoint.
type lbPolicy int

const (
	lbRoundRobin lbPolicy = iota
	lbRandom
	lbLeastRequest
	lbRingHash // also MAGLEV: consistent hashing on the route's hash policy
)

// clusterConfig is a decoded, validated Cluster.
type clusterConfig struct {
	name           string
	eds            bool
	edsName        string       // EDS resource name (service_name or the cluster name)
	static         *endpointSet // load_assignment of a STATIC cluster
	lb             lbPolicy
	choiceCount    int // least_request: hosts sampled per pick
	connectTimeout time.Duration
	tls            *upstreamTLS // nil: plaintext
	tlsMatches     []tlsMatch   // transport_socket_matches, in order
	h2             bool         // HTTP/2 to the endpoints (h2c, or h2 over TLS)
	circuit        thresholds   // circuit_breakers (DEFAULT priority)
	outlier        *outlierConfig
}

// endpointSet is a decoded ClusterLoadAssignment, sorted by priority.
type endpointSet struct {
	endpoints []endpoint
}

type endpoint struct {
	addr       string
	hostname   string
	priority   uint32
	weight     uint32
	healthy    bool
	healthFlag string // Envoy's /clusters health_flags value
	zone       string
	region     string
	subZone    string
	tsMatch    map[string]string // envoy.transport_socket_match metadata
}

func decodeCluster(c *clusterv3.Cluster) (*clusterConfig, error) {
	if c.GetName() == "" {
		return nil, errors.New("cluster has no name")
	}
	wrap := func(err error) error { return fmt.Errorf("cluster %q: %w", c.GetName(), err) }
	out := &clusterConfig{name: c.GetName(), connectTimeout: defaultConnectTimeout}
	var err error
	if t := c.GetConnectTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 {
			return nil, wrap(errors.New("connect_timeout must be positive"))
		}
		out.connectTimeout = t.AsDuration()
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN:
		out.lb = lbRoundRobin
	case clusterv3.Cluster_RANDOM:
		out.lb = lbRandom
	case clusterv3.Cluster_LEAST_REQUEST:
		out.lb = lbLeastRequest
		out.choiceCount = 2
		if n := c.GetLeastRequestLbConfig().GetChoiceCount(); n != nil {
			if n.GetValue() < 2 {
				return nil, wrap(errors.New("least_request_lb_config.choice_count must be at least 2"))
			}
			out.choiceCount = int(min(n.GetValue(), 100))
		}
	case clusterv3.Cluster_RING_HASH, clusterv3.Cluster_MAGLEV:
		out.lb = lbRingHash
	default:
		return nil, wrap(fmt.Errorf("lb_policy %s is not supported", c.GetLbPolicy()))
	}
	if out.tlsMatches, err = decodeTLSMatches(c.GetTransportSocketMatches()); err != nil {
		return nil, wrap(err)
	}
	dt, ok := c.GetClusterDiscoveryType().(*clusterv3.Cluster_Type)
	if !ok {
		return nil, wrap(errors.New("a discovery type (STATIC or EDS) is required; custom cluster types are not supported"))
	}
	switch dt.Type {
	case clusterv3.Cluster_STATIC:
		set, err := decodeEndpoints(c.GetLoadAssignment())
		if err != nil {
			return nil, wrap(fmt.Errorf("load_assignment: %w", err))
		}
		out.static = set
	case clusterv3.Cluster_EDS:
		ec := c.GetEdsClusterConfig()
		if err := checkConfigSource(ec.GetEdsConfig()); err != nil {
			return nil, wrap(fmt.Errorf("eds_cluster_config: %w", err))
		}
		out.eds, out.edsName = true, ec.GetServiceName()
		if out.edsName == "" {
			out.edsName = c.GetName()
		}
	default:
		return nil, wrap(fmt.Errorf("cluster type %s is not supported (STATIC or EDS)", dt.Type))
	}
	if out.h2, err = decodeHTTPProtocol(c); err != nil {
		return nil, wrap(err)
	}
	tlsCtx, err := decodeUpstreamTLS(c.GetTransportSocket())
	if err != nil {
		return nil, wrap(err)
	}
	out.tls = tlsCtx
	out.circuit = decodeCircuitBreakers(c.GetCircuitBreakers())
	if out.outlier, err = decodeOutlierDetection(c.GetOutlierDetection()); err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// secretNames returns the SDS secrets the cluster's upstream TLS needs.
func (c *clusterConfig) secretNames() []string {
	var out []string
	if c.tls != nil {
		out = c.tls.secretNames()
	}
	for _, m := range c.tlsMatches {
		if m.tls != nil {
			out = append(out, m.tls.secretNames()...)
		}
	}
	return out
}

// healthFlags maps an EDS health status to (healthy, Envoy health_flags).
func healthFlags(s corev3.HealthStatus) (bool, string) {
	switch s {
	case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
		return true, "healthy"
	case corev3.HealthStatus_DRAINING:
		return false, "/pending_dynamic_removal"
	case corev3.HealthStatus_DEGRADED:
		return false, "/degraded_eds_health"
	default:
		return false, "/failed_eds_health"
	}
}

func decodeEndpoints(cla *endpointv3.ClusterLoadAssignment) (*endpointSet, error) {
	if cla == nil {
		return nil, errors.New("cluster load assignment is missing")
	}
	out := &endpointSet{}
	seen := map[string]bool{}
	for i, loc := range cla.GetEndpoints() {
		for j, lbe := range loc.GetLbEndpoints() {
			ep := lbe.GetEndpoint()
			if ep == nil {
				return nil, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: only endpoint is supported", i, j)
			}
			addr, err := decodeSocketAddress(ep.GetAddress())
			if err != nil {
				return nil, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: %w", i, j, err)
			}
			if seen[addr] {
				continue // Envoy keeps one host per address
			}
			seen[addr] = true
			w := uint32(1)
			if lw := lbe.GetLoadBalancingWeight(); lw != nil {
				if lw.GetValue() == 0 {
					return nil, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: load_balancing_weight must be positive", i, j)
				}
				w = lw.GetValue()
			}
			healthy, flag := healthFlags(lbe.GetHealthStatus())
			tsMatch, err := endpointMatchFields(lbe.GetMetadata())
			if err != nil {
				return nil, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: metadata %s: %w", i, j, transportSocketMatchKey, err)
			}
			out.endpoints = append(out.endpoints, endpoint{
				addr: addr, hostname: ep.GetHostname(), priority: loc.GetPriority(), weight: w,
				healthy: healthy, healthFlag: flag, tsMatch: tsMatch,
				region: loc.GetLocality().GetRegion(), zone: loc.GetLocality().GetZone(), subZone: loc.GetLocality().GetSubZone(),
			})
		}
	}
	sort.SliceStable(out.endpoints, func(a, b int) bool { return out.endpoints[a].priority < out.endpoints[b].priority })
	return out, nil
}
