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
	c.TransportSocketMatches[0].Name = ""
	if _, err := decodeCluster(c); err == nil || !strings.Contains(err.Error(), "a name is required") {
		t.Errorf("unnamed match: %v", err)
	}
}

// Envoy compares transport_socket_matches values of any kind by value, and
// a match without fields takes every endpoint, metadata or not.
func TestTransportSocketMatchValues(t *testing.T) {
	md := func(fields map[string]any) *corev3.Metadata {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: s}}
	}
	set, err := decodeEndpoints(&endpointv3.ClusterLoadAssignment{ClusterName: "x", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{LbEndpoints: []*endpointv3.LbEndpoint{
			lbe("127.0.0.1", 1, md(map[string]any{"tier": 1, "tls": true})),
			lbe("127.0.0.2", 2, md(map[string]any{"tier": "1"})),
			lbe("127.0.0.3", 3, nil),
		}}}})
	if err != nil {
		t.Fatalf("metadata of other kinds than strings: %v", err)
	}
	numeric, _ := matchFields(&structpb.Struct{Fields: map[string]*structpb.Value{"tier": structpb.NewNumberValue(1.0), "tls": structpb.NewBoolValue(true)}})
	matches := []tlsMatch{{name: "numeric", match: numeric}, {name: "rest"}}
	base, num, rest := &tls.Config{ServerName: "base"}, &tls.Config{ServerName: "numeric"}, &tls.Config{ServerName: "rest"}
	for i, want := range []*tls.Config{num, rest, rest} {
		if got := matchTLS(matches, []*tls.Config{num, rest}, base, set.endpoints[i]); got != want {
			t.Errorf("endpoint %d dials with %q, want %q", i, got.ServerName, want.ServerName)
		}
	}
	if got := matchTLS(matches[:1], []*tls.Config{num}, base, set.endpoints[2]); got != base {
		t.Errorf("an endpoint without metadata took a match with fields (%q)", got.ServerName)
	}
}

func lbe(addr string, port uint32, md *corev3.Metadata) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{Metadata: md, HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}
}
