package xds

import (
	"errors"
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// Sentinel errors.
var (
	// ErrNoRoots: the CA has no trusted root yet.
	ErrNoRoots = errors.New("CA has no roots")
	// ErrNoLeaf: the CA returned no usable leaf for a service.
	ErrNoLeaf = errors.New("CA returned no leaf certificate")
	// ErrInconsistent: a proxy's resources reference something not served.
	ErrInconsistent = errors.New("inconsistent xDS resources")
	// ErrRejected: the proxy rejected (NACKed) a configuration.
	ErrRejected = errors.New("proxy rejected the configuration")
)

// proxyResources is everything built for one connect-proxy instance.
type proxyResources struct {
	service   string   // identity: the destination (app) service
	linked    []string // a terminating gateway's linked services: their leaves too
	listeners []*listener.Listener
	clusters  []*cluster.Cluster
	routes    []*route.RouteConfiguration // RDS of HTTP upstreams with a chain
	upstreams []claKey
	specs     map[claKey]endpointSpec // how each upstream CLA is computed
	// setsLeafDNS: an ingress gateway, whose leaf carries leafDNS as extra
	// DNS SANs (nil: none) for the TLS its listeners serve.
	setsLeafDNS bool
	leafDNS     []string
}

// builder holds what resource names depend on, and the config entries
// discovery chains are compiled from (nil: none).
type builder struct {
	dc          string
	trustDomain string
	set         *configentry.Set
	compile     compileFunc // nil: Set.Compile
	// instances lists a service's catalog instances (a terminating
	// gateway's external services); nil: none.
	instances func(service string) []catalog.ServiceInstance
	// proxies lists every proxy instance (a mesh gateway's targets);
	// nil: none.
	proxies func() []catalog.ServiceInstance
	// meshServices lists the services with a sidecar (a wildcard ingress
	// listener's); nil: none.
	meshServices func() []string
}

// proxy builds a connect proxy's listeners and clusters. Errors wrap
// ErrInvalidProxyConfig and say which field is wrong.
func (b builder) proxy(inst catalog.ServiceInstance) (*proxyResources, error) {
	switch inst.Kind {
	case catalog.KindIngressGateway:
		return b.ingressGateway(inst)
	case catalog.KindTerminatingGateway:
		return b.terminatingGateway(inst)
	case catalog.KindMeshGateway:
		return b.meshGateway(inst)
	}
	p := inst.Proxy
	if p == nil || p.DestinationServiceName == "" {
		return nil, fmt.Errorf("%w: proxy %q has no destination service", ErrInvalidProxyConfig, inst.ID)
	}
	if err := validBind(publicBindAddr, inst.Port); err != nil {
		return nil, fmt.Errorf("public listener: %w", err)
	}
	localAddr := p.LocalServiceAddress
	if localAddr == "" {
		localAddr = "127.0.0.1"
	}
	if err := validBind(localAddr, p.LocalServicePort); err != nil {
		return nil, fmt.Errorf("local service: %w", err)
	}
	prot, err := b.serviceProtocol(p.Config, p.DestinationServiceName)
	if err != nil {
		return nil, err
	}
	timeout, err := b.localConnectTimeout(p.Config, p.DestinationServiceName)
	if err != nil {
		return nil, err
	}
	local, err := localAppCluster(localAddr, p.LocalServicePort, timeout, prot)
	if err != nil {
		return nil, err
	}
	out := &proxyResources{service: p.DestinationServiceName, clusters: []*cluster.Cluster{local}, specs: map[claKey]endpointSpec{}}
	public, err := b.publicListener(inst, prot)
	if err != nil {
		return nil, err
	}
	out.listeners = append(out.listeners, public)
	if err := b.upstreams(p, out); err != nil {
		return nil, err
	}
	if err := b.exposePaths(p, localAddr, timeout, out); err != nil {
		return nil, err
	}
	return out, nil
}

// publicListener is the generated inbound listener, or the escape hatch.
func (b builder) publicListener(inst catalog.ServiceInstance, prot protocol) (*listener.Listener, error) {
	raw, err := parseString(inst.Proxy.Config, cfgPublicListenerJSON)
	if err != nil {
		return nil, err
	}
	if raw == "" {
		var rqTimeout *durationpb.Duration
		if prot.isHTTP() {
			if rqTimeout, err = b.localRequestTimeout(inst.Proxy.Config, inst.Proxy.DestinationServiceName); err != nil {
				return nil, err
			}
		}
		return publicListener(inst.Port, inst.Proxy.DestinationServiceName, prot, rqTimeout)
	}
	l := &listener.Listener{}
	if err := protojson.Unmarshal([]byte(raw), l); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidProxyConfig, cfgPublicListenerJSON, err)
	}
	if l.Name == "" {
		l.Name = PublicListenerName(inst.Port)
	}
	if err := envoyvalidate.All(l); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidProxyConfig, cfgPublicListenerJSON, err)
	}
	return l, nil
}

// upstreams adds one listener per upstream, and the clusters, routes and
// endpoint specs of each upstream's discovery chain.
func (b builder) upstreams(p *catalog.Proxy, out *proxyResources) error {
	clusters := map[string]*cluster.Cluster{}
	routes := map[string]*route.RouteConfiguration{}
	listeners := map[string]bool{out.listeners[0].GetName(): true}
	for i, up := range p.Upstreams {
		if up.DestinationName == "" {
			return fmt.Errorf("%w: upstream %d has no destination_name", ErrInvalidProxyConfig, i)
		}
		bind := up.LocalBindAddress
		if bind == "" {
			bind = "127.0.0.1"
		}
		if err := validBind(bind, up.LocalBindPort); err != nil {
			return fmt.Errorf("upstream %q: %w", up.DestinationName, err)
		}
		prot, err := parseProtocol(up.Config)
		if err != nil {
			return fmt.Errorf("upstream %q: %w", up.DestinationName, err)
		}
		timeout, err := parseTimeoutMS(up.Config, cfgConnectTimeout, defaultConnectTimeout)
		if err != nil {
			return fmt.Errorf("upstream %q: %w", up.DestinationName, err)
		}
		_, timeoutSet := up.Config[cfgConnectTimeout]
		settings := b.upstreamSettings(p.DestinationServiceName, up.DestinationName)
		if v, _ := up.Config[cfgProtocol].(string); v == "" && configentry.IsHTTP(settings.Protocol) {
			prot = protocol(settings.Protocol) // as the upstream's own protocol key
		}
		if !timeoutSet && settings.ConnectTimeoutMs > 0 {
			// Consul merges the service-defaults value into the upstream's
			// config where that leaves connect_timeout_ms unset.
			timeout, timeoutSet = min(settings.ConnectTimeoutMs, maxConnectTimeoutMS), true
		}
		dc := up.Datacenter
		if dc == "" {
			dc = b.dc
		}
		u, err := b.upstreamChain(p.DestinationServiceName, up, bind, dc, prot, upstreamTimeout{ms: timeout, set: timeoutSet, settings: settings})
		if err != nil {
			return err
		}
		if err := out.merge(u, clusters, routes); err != nil {
			return fmt.Errorf("%w: upstreams to %q: %w", ErrInvalidProxyConfig, up.DestinationName, err)
		}
		if listeners[u.listener.Name] {
			return fmt.Errorf("%w: two listeners named %q (local_bind_port must be unique)", ErrInvalidProxyConfig, u.listener.Name)
		}
		listeners[u.listener.Name] = true
		out.listeners = append(out.listeners, u.listener)
	}
	return nil
}

// merge adds an upstream's clusters, routes and endpoint specs; two
// upstreams may share them only when they agree.
func (out *proxyResources) merge(u *upstreamOut, clusters map[string]*cluster.Cluster, routes map[string]*route.RouteConfiguration) error {
	for _, c := range u.clusters {
		if prev, ok := clusters[c.Name]; ok {
			if !proto.Equal(prev, c) {
				return fmt.Errorf("they disagree on cluster %q (protocol, connect timeout, limits or passive health check)", c.Name)
			}
			continue
		}
		clusters[c.Name] = c
		out.clusters = append(out.clusters, c)
	}
	if r := u.route; r != nil {
		if prev, ok := routes[r.Name]; ok {
			if !proto.Equal(prev, r) {
				return fmt.Errorf("they disagree on routes %q", r.Name)
			}
		} else {
			routes[r.Name] = r
			out.routes = append(out.routes, r)
		}
	}
	for k, spec := range u.specs {
		if _, ok := out.specs[k]; !ok {
			out.upstreams = append(out.upstreams, k)
		}
		out.specs[k] = spec
	}
	return nil
}

// proxylessResources are the shared resources a gRPC-Go client needs for
// xds:///<service>: listener, cluster and endpoints, all named <service>.
func proxylessResources(service, dc string, plain []catalog.ServiceInstance) (*listener.Listener, *cluster.Cluster, *endpoint.ClusterLoadAssignment, error) {
	l, err := proxylessListener(service)
	if err != nil {
		return nil, nil, nil, err
	}
	return l, edsCluster(service, defaultConnectTimeout), loadAssignment(service, dc, plain), nil
}
