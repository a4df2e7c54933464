// Package envoy builds Envoy v3 bootstrap configurations for meshlet's
// sidecars, like `consul connect envoy`: node identity, admin listener, a
// static `local_agent` cluster reaching meshlet's gRPC server (xDS and
// ext_authz; a pipe address for unix sockets, since a sidecar inside an
// allocation's namespace cannot reach the host's loopback), ADS dynamic
// resources (delta xDS by default), stats tags, and the escape hatches of
// `proxy { config { ... } }`. It also locates and execs the envoy binary.
// Everything here is pure and safe for concurrent use.
package envoy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/connect"
)

// ErrInvalidConfig wraps every problem with the bootstrap inputs, including
// escape-hatch JSON that does not parse.
var ErrInvalidConfig = errors.New("invalid envoy bootstrap config")

// LocalAgentCluster is the static cluster that reaches meshlet's gRPC server.
const LocalAgentCluster = "local_agent"

// BootstrapConfig is the input of a bootstrap.
type BootstrapConfig struct {
	// ProxyID is the proxy's service ID, used as Envoy's node ID.
	ProxyID string
	// Cluster is the destination service's name (node cluster).
	Cluster string
	// AdminBind is host:port of the admin listener (default 127.0.0.2:19001).
	AdminBind string
	// GRPCAddr is "unix:///path" or "host:port" of meshlet's gRPC server.
	GRPCAddr string
	// Datacenter is recorded in node metadata.
	Datacenter string
	// Token, when set, is sent as gRPC metadata x-consul-token.
	Token string
	// SotW selects state-of-the-world ADS instead of delta.
	SotW bool
	// ProxyConfig is the free-form proxy { config {} } map.
	ProxyConfig map[string]any
}

// Build returns the bootstrap for cfg.
func Build(cfg BootstrapConfig) (*bootstrapv3.Bootstrap, error) {
	if cfg.ProxyID == "" {
		return nil, fmt.Errorf("%w: proxy ID is required", ErrInvalidConfig)
	}
	if cfg.AdminBind == "" {
		cfg.AdminBind = "127.0.0.2:19001"
	}
	admin, err := socketAddress(cfg.AdminBind)
	if err != nil {
		return nil, fmt.Errorf("%w: admin bind: %v", ErrInvalidConfig, err)
	}
	agent, err := localAgentCluster(cfg.GRPCAddr)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node:  node(cfg),
		Admin: &bootstrapv3.Admin{Address: admin},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{agent},
		},
		DynamicResources: dynamicResources(cfg),
		StatsConfig:      statsConfig(node(cfg).Cluster),
		LayeredRuntime: &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{{
			Name:           "static_layer",
			LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: &structpb.Struct{}},
		}}},
	}
	if err := applyEscapeHatches(b, cfg.ProxyConfig, admin); err != nil {
		return nil, err
	}
	return b, nil
}

// JSON renders cfg's bootstrap as Envoy reads it.
func JSON(cfg BootstrapConfig) ([]byte, error) {
	b, err := Build(cfg)
	if err != nil {
		return nil, err
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal bootstrap: %w", err)
	}
	return out, nil
}

func node(cfg BootstrapConfig) *corev3.Node {
	cluster := cfg.Cluster
	if cluster == "" {
		cluster = strings.TrimSuffix(cfg.ProxyID, connect.ProxySuffix)
	}
	meta := map[string]any{"namespace": "default"}
	if cfg.Datacenter != "" {
		meta["datacenter"] = cfg.Datacenter
	}
	md, _ := structpb.NewStruct(meta) // string values always convert
	return &corev3.Node{Id: cfg.ProxyID, Cluster: cluster, Metadata: md}
}

func socketAddress(hostport string) (*corev3.Address, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", p)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("%q is not an IP address", host)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}, nil
}

// grpcAddress turns "unix:///path" or "host:port" into an Envoy address.
func grpcAddress(addr string) (*corev3.Address, error) {
	if addr == "" {
		addr = "127.0.0.1:8502"
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return nil, fmt.Errorf("%w: empty unix socket path in %q", ErrInvalidConfig, addr)
		}
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}}, nil
	}
	a, err := socketAddress(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		return nil, fmt.Errorf("%w: grpc address %q: %v", ErrInvalidConfig, addr, err)
	}
	return a, nil
}

func localAgentCluster(grpcAddr string) (*clusterv3.Cluster, error) {
	addr, err := grpcAddress(grpcAddr)
	if err != nil {
		return nil, err
	}
	opts, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to pack protocol options: %w", err)
	}
	return &clusterv3.Cluster{
		Name:                 LocalAgentCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts,
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: LocalAgentCluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}}}},
		},
	}, nil
}

func dynamicResources(cfg BootstrapConfig) *bootstrapv3.Bootstrap_DynamicResources {
	// LDS and CDS wait for their first response however long it takes (as
	// Consul's bootstrap): with Envoy's default 15 s, a sidecar whose control
	// plane is slow to answer finishes initializing empty and reports ready.
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		InitialFetchTimeout:   durationpb.New(0),
	}
	apiType := corev3.ApiConfigSource_DELTA_GRPC
	if cfg.SotW {
		apiType = corev3.ApiConfigSource_GRPC
	}
	svc := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
		EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: LocalAgentCluster},
	}}
	if cfg.Token != "" {
		svc.InitialMetadata = []*corev3.HeaderValue{{Key: "x-consul-token", Value: cfg.Token}}
	}
	return &bootstrapv3.Bootstrap_DynamicResources{
		LdsConfig: ads,
		CdsConfig: ads,
		AdsConfig: &corev3.ApiConfigSource{
			ApiType:             apiType,
			TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices:        []*corev3.GrpcService{svc},
		},
	}
}

// statsConfig tags upstream cluster stats with the destination service, so
// `cluster.db.default.dc1.internal.<td>.upstream_cx_total` is reported as
// `cluster.upstream_cx_total{meshlet_destination_service="db"}`.
func statsConfig(cluster string) *metricsv3.StatsConfig {
	return &metricsv3.StatsConfig{
		StatsTags: []*metricsv3.TagSpecifier{{
			TagName: "meshlet.destination.service",
			TagValue: &metricsv3.TagSpecifier_Regex{
				Regex: `^cluster\.(([^.]+)\.default\.[^.]+\.internal\.[^.]+\.meshlet\.)`,
			},
		}, {
			TagName:  "local_cluster",
			TagValue: &metricsv3.TagSpecifier_FixedValue{FixedValue: cluster},
		}},
	}
}
