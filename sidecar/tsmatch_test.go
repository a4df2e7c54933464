package sidecar

import (
	"crypto/tls"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// transport_socket_matches: an endpoint whose envoy.transport_socket_match
// metadata holds a match's fields dials with that match's TLS (its own
// SNI, the secrets of both are watched); others use the cluster's.
func TestTransportSocketMatches(t *testing.T) {
	c := upstreamCluster(t, "db", "leaf", "roots")
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	ctx.Sni = "db.default.dc2.internal.example"
	sock := proto.Clone(c.GetTransportSocket()).(*corev3.TransportSocket)
	sock.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustPack(t, ctx)}
	match, _ := structpb.NewStruct(map[string]any{"sni": ctx.Sni})
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{{Name: ctx.Sni, Match: match, TransportSocket: sock}}
	cfg, err := decodeCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.tlsMatches) != 1 || cfg.tlsMatches[0].tls.sni != ctx.Sni || cfg.tlsMatches[0].match["sni"] != ctx.Sni {
		t.Fatalf("matches = %+v", cfg.tlsMatches)
	}
	if n := len(cfg.secretNames()); n != 4 {
		t.Errorf("secret names = %v, want the cluster's and the match's", cfg.secretNames())
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: match}}
	set, err := decodeEndpoints(&endpointv3.ClusterLoadAssignment{ClusterName: "x", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{LbEndpoints: []*endpointv3.LbEndpoint{lbe("127.0.0.1", 1, nil)}},
		{Priority: 1, LbEndpoints: []*endpointv3.LbEndpoint{lbe("127.0.0.2", 2, md)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	base, other := &tls.Config{ServerName: "base"}, &tls.Config{ServerName: ctx.Sni}
	for i, want := range []*tls.Config{base, other} {
		if got := matchTLS(cfg.tlsMatches, []*tls.Config{other}, base, set.endpoints[i]); got != want {
			t.Errorf("endpoint %d dials with %q, want %q", i, got.ServerName, want.ServerName)
		}
	}
	bad := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: {Fields: map[string]*structpb.Value{"sni": structpb.NewNumberValue(1)}}}}
	if _, err := decodeEndpoints(&endpointv3.ClusterLoadAssignment{ClusterName: "x", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{LbEndpoints: []*endpointv3.LbEndpoint{lbe("127.0.0.1", 1, bad)}}}}); err == nil || !strings.Contains(err.Error(), "only string values") {
		t.Errorf("non-string metadata: %v", err)
	}
	c.TransportSocketMatches[0].Name = ""
	if _, err := decodeCluster(c); err == nil || !strings.Contains(err.Error(), "a name is required") {
		t.Errorf("unnamed match: %v", err)
	}
}

func lbe(addr string, port uint32, md *corev3.Metadata) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{Metadata: md, HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}
}
