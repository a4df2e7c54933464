package xds

import (
	"errors"
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
)

// ErrInvalidChain: a compiled discovery chain cannot be translated (a
// route to an unknown target, weights that do not sum to 100, an unknown
// load-balancing policy).
var ErrInvalidChain = errors.New("invalid discovery chain")

// upstreamOut is what one upstream compiles to.
type upstreamOut struct {
	listener *listener.Listener
	route    *route.RouteConfiguration // nil unless the listener uses RDS
	clusters []*cluster.Cluster
	specs    map[claKey]endpointSpec
}

// upstreamTimeout is an upstream's connect timeout (set: by its own config
// or by the caller's service-defaults) and the rest of its UpstreamConfig.
type upstreamTimeout struct {
	ms       int
	set      bool
	settings consul.UpstreamConfig
}

// compileFunc compiles a service's discovery chain (Set.Compile; tests
// inject hand-built chains).
type compileFunc func(set *configentry.Set, service, dc string) (*configentry.Chain, error)

// entries is the set of config entries the builder compiles chains from.
func (b builder) entries() *configentry.Set {
	if b.set == nil {
		return configentry.NewSet()
	}
	return b.set
}

// serviceProtocol is a proxied service's protocol: its proxy config's
// protocol when set, else its service-defaults (or proxy-defaults).
func (b builder) serviceProtocol(cfg map[string]any, service string) (protocol, error) {
	prot, err := parseProtocol(cfg)
	if err != nil {
		return prot, err
	}
	if v, _ := cfg[cfgProtocol].(string); v != "" {
		return prot, nil
	}
	if p := protocol(b.entries().Protocol(service)); configentry.IsHTTP(string(p)) {
		return p, nil
	}
	return protoTCP, nil
}

// routeName is the RDS name of an upstream's routes: the destination,
// with its datacenter when that is not the local one (service names have
// no dots, so these never collide).
func (b builder) routeName(dest, dc string) string {
	if dc == b.dc {
		return dest
	}
	return dest + "." + dc
}

// upstreamChain compiles dest's discovery chain into the upstream's
// listener, routes, clusters and endpoint specs. A default chain (no
// config entry concerns dest) gives exactly the pre-L7 resources: the
// upstream config's protocol and timeout, one cluster named ClusterName.
func (b builder) upstreamChain(own string, up catalog.Upstream, bind, dc string, cfgProt protocol, ut upstreamTimeout) (*upstreamOut, error) {
	compile := b.compile
	if compile == nil {
		compile = (*configentry.Set).Compile
	}
	ch, err := compile(b.entries(), up.DestinationName, dc)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %q: %w", ErrInvalidChain, up.DestinationName, err)
	}
	return b.translate(ch, own, up, bind, dc, cfgProt, ut)
}

// translate turns a compiled chain into an upstream's resources.
func (b builder) translate(ch *configentry.Chain, own string, up catalog.Upstream, bind, dc string, cfgProt protocol, ut upstreamTimeout) (*upstreamOut, error) {
	dest := up.DestinationName
	var err error
	prot := cfgProt
	if !ch.Default && configentry.IsHTTP(ch.Protocol) {
		prot = protocol(ch.Protocol)
	}
	out := &upstreamOut{specs: map[claKey]endpointSpec{}}
	gwMode := b.meshGatewayMode(own, up)
	names := map[string]string{} // target ID -> cluster
	clusterOf := func(id string) (string, error) {
		if n, ok := names[id]; ok {
			return n, nil
		}
		t := ch.Targets[id]
		if t == nil {
			return "", fmt.Errorf("%w: unknown target %q", ErrInvalidChain, id)
		}
		c, key, spec, err := b.targetCluster(ch, t, own, prot, ut, gwMode)
		if err != nil {
			return "", err
		}
		names[id] = c.GetName()
		out.clusters = append(out.clusters, c)
		out.specs[key] = spec
		return c.GetName(), nil
	}
	if prot.isHTTP() && !ch.Default {
		rn := b.routeName(dest, dc)
		if out.route, err = routeConfig(rn, ch, clusterOf); err != nil {
			return nil, err
		}
		// Entry strings (header names, regexes) reach the routes: check them
		// here for a clear error rather than a NACK. No Any inside, so the
		// generated ValidateAll sees everything.
		if err := out.route.ValidateAll(); err != nil {
			return nil, fmt.Errorf("%w: routes of %q: %w", ErrInvalidChain, dest, err)
		}
		out.listener, err = rdsListener(dest, bind, up.LocalBindPort, rn)
		return out, err
	}
	if len(ch.Routes) != 1 || len(ch.Routes[0].Splits) != 1 {
		return nil, fmt.Errorf("%w: %s upstream %q has %d routes; only http, http2 and grpc may route or split", ErrInvalidChain, prot, dest, len(ch.Routes))
	}
	name, err := clusterOf(ch.Routes[0].Splits[0].TargetID)
	if err != nil {
		return nil, err
	}
	out.listener, err = upstreamListener(dest, bind, up.LocalBindPort, name, prot)
	return out, err
}

// targetCluster is the mTLS EDS cluster of one target, accepting the
// identities of the target and of its failover targets, and the spec of
// its load assignment (failover targets as lower priorities).
//
// A target in another datacenter whose mesh gateway mode (the upstream's
// override gwMode, else its own: targetMeshGatewayMode) is local or
// remote is reached through the gateways: the cluster keeps its name (the
// SNI the gateways route by) and mTLS to the target's identity, and its
// endpoints are the gateways (claKey.gateway). Failover targets are
// reached by their own modes (addSNIMatches).
func (b builder) targetCluster(ch *configentry.Chain, t *configentry.Target, own string, prot protocol, ut upstreamTimeout, gwMode string) (*cluster.Cluster, claKey, endpointSpec, error) {
	first := b.gatewaySource(sourceOf(t, b.dc), b.targetMeshGatewayMode(gwMode, t))
	key := claKey{service: first.service, dc: first.dc, subset: t.Subset}
	primarySNI := subsetClusterName(t.Subset, first.service, first.dc, b.trustDomain)
	spec := endpointSpec{sources: []endpointSource{first}}
	ids := []string{SpiffeID(b.trustDomain, first.dc, first.service)}
	seen := map[string]bool{ids[0]: true}
	for _, fid := range t.Failover {
		ft := ch.Targets[fid]
		if ft == nil {
			return nil, key, spec, fmt.Errorf("%w: target %q fails over to unknown target %q", ErrInvalidChain, t.ID, fid)
		}
		src := b.gatewaySource(sourceOf(ft, b.dc), b.targetMeshGatewayMode(gwMode, ft))
		if src.gateway != "" {
			// Through the gateways, with the target's own SNI.
			if sni := subsetClusterName(ft.Subset, src.service, src.dc, b.trustDomain); sni != primarySNI {
				src.tlsMatch = sni
			}
		}
		spec.sources = append(spec.sources, src)
		if id := SpiffeID(b.trustDomain, src.dc, src.service); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	key.gateway = claGatewayKey(spec.sources, b.dc)
	c, err := meshCluster(subsetClusterName(key.subset, key.service, key.dc, b.trustDomain), own, ids, ut.ms, prot)
	if err != nil {
		return nil, key, spec, err
	}
	if key.gateway != "" {
		c.EdsClusterConfig.ServiceName = key.clusterName(b.trustDomain)
		if err := addSNIMatches(c, spec); err != nil {
			return nil, key, spec, err
		}
	}
	// Consul's precedence: the upstream's connect_timeout_ms (its own
	// config, else the caller's service-defaults UpstreamConfig) overrides
	// the resolver's ConnectTimeout, which overrides the 5 s default.
	if !ch.Default && !ut.set && t.ConnectTimeout > 0 {
		c.ConnectTimeout = durationpb.New(t.ConnectTimeout)
	}
	if err := applyUpstreamSettings(c, ut.settings); err != nil {
		return nil, key, spec, fmt.Errorf("upstream config of %q: %w", t.ID, err)
	}
	if err := applyLB(c, t.LoadBalancer); err != nil {
		return nil, key, spec, fmt.Errorf("target %q: %w", t.ID, err)
	}

	return c, key, spec, nil
}

// applyLB sets a cluster's load-balancing policy from a resolver's.
func applyLB(c *cluster.Cluster, lb *consul.LoadBalancer) error {
	if lb == nil {
		return nil
	}
	switch lb.Policy {
	case "", "round_robin":
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
	case "least_request":
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		// Envoy wants at least 2 choices (its default); fewer is ignored.
		if cfg := lb.LeastRequestConfig; cfg != nil && cfg.ChoiceCount >= 2 {
			c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{
				ChoiceCount: wrapperspb.UInt32(cfg.ChoiceCount),
			}}
		}
	case "random":
		c.LbPolicy = cluster.Cluster_RANDOM
	case "ring_hash":
		c.LbPolicy = cluster.Cluster_RING_HASH
		if cfg := lb.RingHashConfig; cfg != nil && (cfg.MinimumRingSize > 0 || cfg.MaximumRingSize > 0) {
			rh := &cluster.Cluster_RingHashLbConfig{}
			if cfg.MinimumRingSize > 0 {
				rh.MinimumRingSize = wrapperspb.UInt64(cfg.MinimumRingSize)
			}
			if cfg.MaximumRingSize > 0 {
				rh.MaximumRingSize = wrapperspb.UInt64(cfg.MaximumRingSize)
			}
			c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
		}
	case "maglev":
		c.LbPolicy = cluster.Cluster_MAGLEV
	default:
		return fmt.Errorf("%w: load balancer policy %q is not one of round_robin, least_request, random, ring_hash, maglev", ErrInvalidChain, lb.Policy)
	}
	return nil
}

// rdsListener binds an upstream whose HTTP routes come over RDS (ADS)
// under routeName.
func rdsListener(dest, bindAddr string, port int, routeName string) (*listener.Listener, error) {
	m, err := httpManager("upstream."+dest, routeName, "", nil)
	if err != nil {
		return nil, err
	}
	m.RouteSpecifier = &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: routeName, ConfigSource: adsSource()}}
	f, err := networkFilter(hcmFilter, m)
	if err != nil {
		return nil, err
	}
	return outboundListener(dest, bindAddr, port, f), nil
}
