package xds

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// transportSocketMatchKey is the endpoint metadata namespace Envoy's
// transport_socket_matches compare against.
const transportSocketMatchKey = "envoy.transport_socket_match"

// Failover through mesh gateways (Consul's behaviour: a failover target
// in another datacenter follows its own mesh gateway mode, which is the
// upstream's when that is set: targetMeshGatewayMode). The
// gateways route by SNI, so such a target's endpoints (the gateways) must
// be dialed with the target's own SNI, not the primary's: the cluster gets
// a transport_socket_matches entry per such SNI (the cluster's TLS with
// only the SNI changed) and the endpoints of that priority carry
// envoy.transport_socket_match {sni: <target's cluster name>}. Targets
// reached directly keep the cluster's transport socket (sidecars accept
// any SNI of the mesh).

// addSNIMatches adds a transport socket match to c for every source of
// spec with a tlsMatch, in order, once each.
func addSNIMatches(c *cluster.Cluster, spec endpointSpec) error {
	seen := map[string]bool{}
	for _, src := range spec.sources {
		if src.tlsMatch == "" || seen[src.tlsMatch] {
			continue
		}
		seen[src.tlsMatch] = true
		ctx := &tlsv3.UpstreamTlsContext{}
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			return fmt.Errorf("failover to %s: %w", src.tlsMatch, err)
		}
		ctx.Sni = src.tlsMatch
		sock, err := tlsSocket(ctx)
		if err != nil {
			return err
		}
		match, err := structpb.NewStruct(map[string]any{"sni": src.tlsMatch})
		if err != nil {
			return err
		}
		c.TransportSocketMatches = append(c.TransportSocketMatches, &cluster.Cluster_TransportSocketMatch{
			Name: src.tlsMatch, Match: match, TransportSocket: sock,
		})
	}
	return nil
}

// withSNIMatch marks endpoints for the transport socket match of sni
// (none: unchanged). The endpoints are copies.
func withSNIMatch(eps []*endpoint.LbEndpoint, sni string) []*endpoint.LbEndpoint {
	if sni == "" {
		return eps
	}
	md := &core.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: {
		Fields: map[string]*structpb.Value{"sni": structpb.NewStringValue(sni)},
	}}}
	out := make([]*endpoint.LbEndpoint, len(eps))
	for i, e := range eps {
		e = proto.Clone(e).(*endpoint.LbEndpoint)
		e.Metadata = md
		out[i] = e
	}
	return out
}
