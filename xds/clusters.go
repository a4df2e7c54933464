package xds

import (
	"fmt"
	"net"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
)

// Well-known names of the resources this package serves or references.
const (
	// LocalAppCluster is each proxy's cluster for its local application.
	LocalAppCluster = "local_app"
	// LocalAgentCluster is the bootstrap's static cluster for the agent's
	// gRPC port (ADS, ext_authz); it is referenced, never served.
	LocalAgentCluster = "local_agent"
	// RootsSecret is the SDS validation context holding the trusted roots.
	RootsSecret = "roots"

	tlsTransportSocket    = "envoy.transport_sockets.tls"
	httpProtocolOptionsID = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// ClusterName is the SNI-style name of a service's upstream cluster:
// "<svc>.default.<dc>.internal.<trust-domain>".
func ClusterName(service, dc, trustDomain string) string {
	return service + ".default." + dc + ".internal." + trustDomain
}

// LeafSecretName is the SDS name of a service's leaf certificate.
func LeafSecretName(service string) string { return "leaf:" + service }

// SpiffeID is a service's identity in the trust domain.
func SpiffeID(trustDomain, dc, service string) string {
	return "spiffe://" + trustDomain + "/ns/default/dc/" + dc + "/svc/" + service
}

// adsSource is the config source "over the ADS stream".
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

func sdsConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

func anyOf(m proto.Message) (*anypb.Any, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("failed to pack %s: %w", proto.MessageName(m), err)
	}
	return a, nil
}

func tlsSocket(ctx proto.Message) (*core.TransportSocket, error) {
	a, err := anyOf(ctx)
	if err != nil {
		return nil, err
	}
	return &core.TransportSocket{Name: tlsTransportSocket, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}

func socketAddress(addr string, port int) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Protocol:      core.SocketAddress_TCP,
		Address:       addr,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

func lbEndpoint(addr string, port int) *endpoint.LbEndpoint {
	return &endpoint.LbEndpoint{
		HostIdentifier:      &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: socketAddress(addr, port)}},
		HealthStatus:        core.HealthStatus_HEALTHY,
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}
}

// http2Options makes a cluster speak HTTP/2 to its endpoints.
func http2Options() (map[string]*anypb.Any, error) {
	a, err := anyOf(&upstreamhttp.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return map[string]*anypb.Any{httpProtocolOptionsID: a}, nil
}

func msDuration(ms int) *durationpb.Duration {
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

// localAppCluster is the STATIC cluster to the proxied application.
func localAppCluster(addr string, port, timeoutMS int, prot protocol) (*cluster.Cluster, error) {
	c := &cluster.Cluster{
		Name:                 LocalAppCluster,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		ConnectTimeout:       msDuration(timeoutMS),
		LoadAssignment: &endpoint.ClusterLoadAssignment{
			ClusterName: LocalAppCluster,
			Endpoints:   []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{lbEndpoint(addr, port)}}},
		},
	}
	if prot.isHTTP2() {
		opts, err := http2Options()
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = opts
	}
	return c, nil
}

// upstreamCluster is an mTLS EDS cluster to a mesh service. The proxy
// presents its own leaf and accepts only a peer whose certificate chains to
// the roots AND carries the destination's SPIFFE ID.
func upstreamCluster(name, ownService, destSpiffe string, timeoutMS int, prot protocol) (*cluster.Cluster, error) {
	return meshCluster(name, ownService, []string{destSpiffe}, timeoutMS, prot)
}

// meshCluster is upstreamCluster accepting any of several identities (a
// target and the services it fails over to).
func meshCluster(name, ownService string, destSpiffes []string, timeoutMS int, prot protocol) (*cluster.Cluster, error) {
	sans := make([]*tlsv3.SubjectAltNameMatcher, len(destSpiffes))
	for i, id := range destSpiffes {
		sans[i] = &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: id}},
		}
	}
	sock, err := tlsSocket(&tlsv3.UpstreamTlsContext{
		Sni: name,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(LeafSecretName(ownService))},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext: &tlsv3.CertificateValidationContext{
						MatchTypedSubjectAltNames: sans,
					},
					ValidationContextSdsSecretConfig: sdsConfig(RootsSecret),
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	c := edsCluster(name, timeoutMS)
	c.TransportSocket = sock
	if prot.isHTTP2() {
		opts, err := http2Options()
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = opts
	}
	return c, nil
}

// edsCluster is a round-robin cluster whose endpoints come over ADS under
// the cluster's own name.
func edsCluster(name string, timeoutMS int) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       msDuration(timeoutMS),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
	}
}

// loadAssignment lists instances at Address:Port, weight 1, in one locality
// of weight 1 (gRPC-Go ignores zero-weight localities). Instances without a
// usable address are skipped; duplicates are listed once.
func loadAssignment(name, dc string, insts []catalog.ServiceInstance) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	var eps []*endpoint.LbEndpoint
	seen := map[string]bool{}
	for _, inst := range insts {
		if !inst.Healthy || inst.Port <= 0 || inst.Port > 65535 || net.ParseIP(inst.Address) == nil {
			continue
		}
		key := net.JoinHostPort(inst.Address, fmt.Sprint(inst.Port))
		if seen[key] {
			continue
		}
		seen[key] = true
		eps = append(eps, lbEndpoint(inst.Address, inst.Port))
	}
	if len(eps) > 0 {
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{{
			Locality:            &core.Locality{Region: dc},
			LbEndpoints:         eps,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}}
	}
	return cla
}

// rootsSecret is the validation context trusting every current root (and
// the intermediates that cross-sign a new root during a rotation).
func rootsSecret(roots ca.Roots) (*tlsv3.Secret, error) {
	var pems []string
	for _, r := range roots.Roots {
		pems = append(pems, strings.TrimSpace(r.RootCertPEM))
		for _, im := range r.IntermediateCertsPEM {
			pems = append(pems, strings.TrimSpace(im))
		}
	}
	if len(pems) == 0 {
		return nil, fmt.Errorf("failed to build roots secret: %w", ErrNoRoots)
	}
	return &tlsv3.Secret{
		Name: RootsSecret,
		Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: strings.Join(pems, "\n") + "\n"}},
		}},
	}, nil
}

// leafSecret is a service's certificate chain and key.
func leafSecret(service string, leaf *ca.Leaf) (*tlsv3.Secret, error) {
	if leaf == nil || leaf.CertPEM == "" || leaf.PrivateKeyPEM == "" {
		return nil, fmt.Errorf("failed to build leaf secret for %q: %w", service, ErrNoLeaf)
	}
	return &tlsv3.Secret{
		Name: LeafSecretName(service),
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: leaf.CertPEM}},
			PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: leaf.PrivateKeyPEM}},
		}},
	}, nil
}
