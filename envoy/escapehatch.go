package envoy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Escape-hatch keys of proxy { config { ... } } handled in the bootstrap.
const (
	KeyPrometheusBindAddr  = "envoy_prometheus_bind_addr"
	KeyStatsBindAddr       = "envoy_stats_bind_addr"
	KeyExtraStaticClusters = "envoy_extra_static_clusters_json"
	selfAdminCluster       = "self_admin"
)

func applyEscapeHatches(b *bootstrapv3.Bootstrap, pc map[string]any, admin *corev3.Address) error {
	sr := b.StaticResources
	needAdmin := false
	for _, h := range []struct{ key, name, path, rewrite string }{
		{KeyPrometheusBindAddr, "envoy_prometheus_metrics_listener", "/metrics", "/stats/prometheus"},
		{KeyStatsBindAddr, "envoy_metrics_listener", "/stats", "/stats"},
	} {
		addr, err := stringOpt(pc, h.key)
		if err != nil || addr == "" {
			if err != nil {
				return err
			}
			continue
		}
		l, err := adminRouteListener(h.name, addr, h.path, h.rewrite)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidConfig, h.key, err)
		}
		sr.Listeners = append(sr.Listeners, l)
		needAdmin = true
	}
	if needAdmin {
		sr.Clusters = append(sr.Clusters, staticCluster(selfAdminCluster, admin))
	}
	raw, err := stringOpt(pc, KeyExtraStaticClusters)
	if err != nil {
		return err
	}
	extra, err := ParseClusters(raw)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidConfig, KeyExtraStaticClusters, err)
	}
	sr.Clusters = append(sr.Clusters, extra...)
	return nil
}

func stringOpt(pc map[string]any, key string) (string, error) {
	v, ok := pc[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s must be a string, got %T", ErrInvalidConfig, key, v)
	}
	return strings.TrimSpace(s), nil
}

// ParseClusters parses Envoy clusters given as one JSON object, a JSON
// array, or comma-separated objects (as Consul accepts).
func ParseClusters(raw string) ([]*clusterv3.Cluster, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, nil
	}
	if !strings.HasPrefix(raw, "[") {
		raw = "[" + raw + "]"
	}
	var items []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &items); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	out := make([]*clusterv3.Cluster, 0, len(items))
	for i, item := range items {
		c := &clusterv3.Cluster{}
		if err := protojson.Unmarshal(item, c); err != nil {
			return nil, fmt.Errorf("cluster %d: %w", i, err)
		}
		if err := c.ValidateAll(); err != nil {
			return nil, fmt.Errorf("cluster %d (%s): %w", i, c.GetName(), err)
		}
		out = append(out, c)
	}
	return out, nil
}

func staticCluster(name string, addr *corev3.Address) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(5 * time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}}}},
		},
	}
}

// adminRouteListener serves path on addr by forwarding to the admin
// listener's rewrite path (Envoy's admin is never exposed itself).
func adminRouteListener(name, addr, path, rewrite string) (*listenerv3.Listener, error) {
	sa, err := socketAddress(addr)
	if err != nil {
		return nil, err
	}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("failed to pack router: %w", err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		CodecType:  hcmv3.HttpConnectionManager_HTTP1,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: path}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: selfAdminCluster},
						PrefixRewrite:    rewrite,
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("failed to pack http connection manager: %w", err)
	}
	return &listenerv3.Listener{
		Name:    name,
		Address: sa,
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
		}}}},
	}, nil
}
