package sidecar

import (
	"crypto/tls"
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// transportSocketMatchKey is the endpoint metadata namespace Envoy's
// transport_socket_matches compare against.
const transportSocketMatchKey = "envoy.transport_socket_match"

// tlsMatch is one decoded transport_socket_matches entry: an endpoint
// whose envoy.transport_socket_match metadata holds every field of match
// dials with tls instead of the cluster's transport socket (the control
// plane uses it for failover targets behind mesh gateways, which need
// their own SNI).
type tlsMatch struct {
	name  string
	match map[string]string
	tls   *upstreamTLS
}

// decodeTLSMatches decodes a cluster's transport_socket_matches: string
// fields only, each an upstream TLS (or raw buffer) socket.
func decodeTLSMatches(ms []*clusterv3.Cluster_TransportSocketMatch) ([]tlsMatch, error) {
	var out []tlsMatch
	for i, m := range ms {
		if m.GetName() == "" {
			return nil, fmt.Errorf("transport_socket_matches[%d]: a name is required", i)
		}
		fields, err := stringFields(m.GetMatch())
		if err != nil {
			return nil, fmt.Errorf("transport_socket_matches %q: match: %w", m.GetName(), err)
		}
		u, err := decodeUpstreamTLS(m.GetTransportSocket())
		if err != nil {
			return nil, fmt.Errorf("transport_socket_matches %q: %w", m.GetName(), err)
		}
		out = append(out, tlsMatch{name: m.GetName(), match: fields, tls: u})
	}
	return out, nil
}

// endpointMatchFields is an endpoint's envoy.transport_socket_match
// metadata (string fields; nil when absent).
func endpointMatchFields(md *corev3.Metadata) (map[string]string, error) {
	s := md.GetFilterMetadata()[transportSocketMatchKey]
	if s == nil {
		return nil, nil
	}
	return stringFields(s)
}

func stringFields(s *structpb.Struct) (map[string]string, error) {
	if len(s.GetFields()) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for k, v := range s.GetFields() {
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, errors.New("only string values are supported")
		}
		out[k] = sv.StringValue
	}
	return out, nil
}

// matchTLS is the client configuration of an endpoint: that of the first
// match whose fields its metadata holds, else the cluster's (base).
func matchTLS(matches []tlsMatch, confs []*tls.Config, base *tls.Config, ep endpoint) *tls.Config {
	if len(matches) == 0 || len(ep.tsMatch) == 0 {
		return base
	}
	for i, m := range matches {
		ok := true
		for k, v := range m.match {
			if ep.tsMatch[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return confs[i]
		}
	}
	return base
}
