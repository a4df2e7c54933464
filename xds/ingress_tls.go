package xds

import (
	"fmt"
	"slices"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/configentry"
)

// IngressDNSDomain is the DNS domain of the default names an ingress
// gateway's certificate covers (Consul's default domain; meshlet serves
// no DNS of its own).
const IngressDNSDomain = "consul"

// externalSDSTimeout bounds a call to an external SDS cluster (Consul's
// value).
const externalSDSTimeout = 5 * time.Second

var envoyTLSVersions = map[string]tlsv3.TlsParameters_TlsProtocol{
	"": tlsv3.TlsParameters_TLS_AUTO, configentry.TLSVersionAuto: tlsv3.TlsParameters_TLS_AUTO,
	configentry.TLSv10: tlsv3.TlsParameters_TLSv1_0, configentry.TLSv11: tlsv3.TlsParameters_TLSv1_1,
	configentry.TLSv12: tlsv3.TlsParameters_TLSv1_2, configentry.TLSv13: tlsv3.TlsParameters_TLSv1_3,
}

// IngressDNSSANs are the DNS SANs Consul adds to an ingress gateway's leaf
// when a listener serves TLS from the mesh CA: "*.ingress.<domain>" and
// "*.ingress.<dc>.<domain>" (the default namespace's names), then every
// service's hosts (without a port). nil when no listener does.
func IngressDNSSANs(e *consul.IngressGatewayConfigEntry, dc string) []string {
	var hosts []string
	caTLS := false
	for _, l := range e.Listeners {
		if t := configentry.ResolveIngressTLS(e.TLS, l.TLS); t != nil && t.SDS == nil {
			caTLS = true
		}
		for _, s := range l.Services {
			for _, h := range s.Hosts {
				if h = strings.ToLower(hostOnly(h)); h != "*" && !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
	}
	if !caTLS {
		return nil
	}
	return append([]string{"*.ingress." + IngressDNSDomain, "*.ingress." + dc + "." + IngressDNSDomain}, hosts...)
}

func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		return h[:i]
	}
	return h
}

// ingressTLSSocket is the downstream TLS of a listener whose effective tls
// block is t (nil: plaintext): the gateway's own leaf over SDS (its DNS
// SANs set by IngressDNSSANs), or the certificate an external SDS cluster
// serves, as Consul configures it; no client certificate is asked for.
// Consul inlines the leaf; meshlet names the leaf's SDS secret so a
// renewal does not rebuild the listener, and both proxies accept either.
func ingressTLSSocket(gateway string, t *consul.GatewayTLSConfig, alpn []string) (*core.TransportSocket, error) {
	if t == nil {
		return nil, nil
	}
	params := &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: envoyTLSVersions[t.TLSMinVersion],
		TlsMaximumProtocolVersion: envoyTLSVersions[t.TLSMaxVersion],
	}
	for _, c := range t.CipherSuites {
		name, ok := configentry.EnvoyCipherSuite(c)
		if !ok {
			return nil, fmt.Errorf("%w: cipher suite %q is not supported", ErrInvalidProxyConfig, c)
		}
		params.CipherSuites = append(params.CipherSuites, name)
	}
	cert := sdsConfig(LeafSecretName(gateway))
	if t.SDS != nil {
		cert = &tlsv3.SdsSecretConfig{Name: t.SDS.CertResource, SdsConfig: &core.ConfigSource{
			ResourceApiVersion: core.ApiVersion_V3,
			ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: &core.ApiConfigSource{
				ApiType:             core.ApiConfigSource_GRPC,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcServices: []*core.GrpcService{{
					TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: t.SDS.ClusterName}},
					Timeout:         durationpb.New(externalSDSTimeout),
				}},
			}},
		}}
	}
	a, err := anyOf(&tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      params,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{cert},
			AlpnProtocols:                  alpn,
		},
		RequireClientCertificate: wrapperspb.Bool(false),
	})
	if err != nil {
		return nil, err
	}
	return &core.TransportSocket{Name: tlsTransportSocket, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}

// withIngressTLS puts the listener's downstream TLS on each of its filter
// chains.
func withIngressTLS(lst *listener.Listener, gateway string, gw consul.GatewayTLSConfig, l consul.IngressListener, alpn []string) error {
	ts, err := ingressTLSSocket(gateway, configentry.ResolveIngressTLS(gw, l.TLS), alpn)
	if err != nil || ts == nil {
		return err
	}
	for _, fc := range lst.GetFilterChains() {
		fc.TransportSocket = ts
	}
	return nil
}
