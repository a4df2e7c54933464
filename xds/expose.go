package xds

import (
	"fmt"
	"net"
	"sort"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshlet/meshlet/catalog"
)

// Expose path protocols (proxy { expose { path { protocol } } }).
const (
	exposeHTTP  = "http"
	exposeHTTP2 = "http2"
)

// ExposeListenerName names the plain-HTTP listener serving a proxy's
// expose paths on one port.
func ExposeListenerName(port int) string {
	return "exposed_path:" + net.JoinHostPort(publicBindAddr, strconv.Itoa(port))
}

// ExposeClusterName names the local cluster an expose path forwards to,
// as Consul does ("exposed_cluster_<local_path_port>"); an http2 path gets
// its own cluster, since the protocol is a cluster option.
func ExposeClusterName(localPort int, protocol string) string {
	name := "exposed_cluster_" + strconv.Itoa(localPort)
	if protocol == exposeHTTP2 {
		name += "_http2"
	}
	return name
}

// exposePaths adds the proxy's expose paths: per listener port a listener
// on 0.0.0.0 without TLS or authorization (Consul's expose paths are for
// callers outside the mesh, such as health checkers), whose HTTP
// connection manager routes exactly the exposed paths to local clusters
// on the app's address; any other path answers 404. A port already used
// by another of the proxy's listeners is an error.
func (b builder) exposePaths(p *catalog.Proxy, localAddr string, timeoutMS int, out *proxyResources) error {
	if len(p.Expose) == 0 {
		return nil
	}
	taken := map[int]string{}
	for _, l := range out.listeners {
		taken[int(l.GetAddress().GetSocketAddress().GetPortValue())] = l.GetName()
	}
	byPort := map[int][]catalog.ExposePath{}
	clusters := map[string]bool{}
	for _, e := range p.Expose {
		if err := validExposePath(e); err != nil {
			return err
		}
		if name, ok := taken[e.ListenerPort]; ok {
			return fmt.Errorf("%w: expose path %q: listener_port %d is already the port of listener %q", ErrInvalidProxyConfig, e.Path, e.ListenerPort, name)
		}
		byPort[e.ListenerPort] = append(byPort[e.ListenerPort], e)
		name := ExposeClusterName(e.LocalPathPort, exposeProtocol(e))
		if clusters[name] {
			continue
		}
		clusters[name] = true
		c, err := exposeCluster(name, localAddr, e.LocalPathPort, timeoutMS, exposeProtocol(e))
		if err != nil {
			return err
		}
		out.clusters = append(out.clusters, c)
	}
	ports := make([]int, 0, len(byPort))
	for port := range byPort {
		ports = append(ports, port)
	}
	sort.Ints(ports)
	for _, port := range ports {
		l, err := exposeListener(port, byPort[port])
		if err != nil {
			return err
		}
		out.listeners = append(out.listeners, l)
	}
	return nil
}

func validExposePath(e catalog.ExposePath) error {
	if len(e.Path) == 0 || e.Path[0] != '/' {
		return fmt.Errorf("%w: expose path %q must start with \"/\"", ErrInvalidProxyConfig, e.Path)
	}
	switch e.Protocol {
	case "", exposeHTTP, exposeHTTP2:
	default:
		return fmt.Errorf("%w: expose path %q: protocol %q is not http or http2", ErrInvalidProxyConfig, e.Path, e.Protocol)
	}
	if err := validBind(publicBindAddr, e.ListenerPort); err != nil {
		return fmt.Errorf("expose path %q listener: %w", e.Path, err)
	}
	if err := validBind(publicBindAddr, e.LocalPathPort); err != nil {
		return fmt.Errorf("expose path %q local_path_port: %w", e.Path, err)
	}
	return nil
}

func exposeProtocol(e catalog.ExposePath) string {
	if e.Protocol == exposeHTTP2 {
		return exposeHTTP2
	}
	return exposeHTTP
}

// exposeCluster is a static cluster to the app's address and the path's
// local port, speaking HTTP/2 for http2 paths.
func exposeCluster(name, addr string, port, timeoutMS int, protocol string) (*cluster.Cluster, error) {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		ConnectTimeout:       msDuration(timeoutMS),
		LoadAssignment: &endpoint.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints:   []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{lbEndpoint(addr, port)}}},
		},
	}
	if protocol == exposeHTTP2 {
		opts, err := http2Options()
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = opts
	}
	return c, nil
}

// exposeListener serves paths on 0.0.0.0:port in plain HTTP (HTTP/1.1 or
// h2c): each path matched exactly, nothing else routed (Envoy answers 404).
func exposeListener(port int, paths []catalog.ExposePath) (*listener.Listener, error) {
	name := ExposeListenerName(port)
	routes := make([]*route.Route, 0, len(paths))
	for _, e := range paths {
		routes = append(routes, &route.Route{
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: e.Path}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: ExposeClusterName(e.LocalPathPort, exposeProtocol(e))},
			}},
		})
	}
	r, err := anyOf(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	m := &hcm.HttpConnectionManager{
		StatPrefix:     "exposed_path_" + strconv.Itoa(port),
		CodecType:      hcm.HttpConnectionManager_AUTO,
		UpgradeConfigs: websocketUpgrades(),
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name:         name,
			VirtualHosts: []*route.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: routes}},
		}},
		HttpFilters: []*hcm.HttpFilter{{Name: routerFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: r}}},
	}
	f, err := networkFilter(hcmFilter, m)
	if err != nil {
		return nil, err
	}
	return &listener.Listener{
		Name:             name,
		Address:          socketAddress(publicBindAddr, port),
		TrafficDirection: core.TrafficDirection_INBOUND,
		FilterChains:     []*listener.FilterChain{{Filters: []*listener.Filter{f}}},
	}, nil
}
