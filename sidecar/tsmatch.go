package sidecar

import (
	"crypto/tls"
	"fmt"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
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

// decodeTLSMatches decodes a cluster's transport_socket_matches, each an
// upstream TLS (or raw buffer) socket.
func decodeTLSMatches(ms []*clusterv3.Cluster_TransportSocketMatch) ([]tlsMatch, error) {
	var out []tlsMatch
	for i, m := range ms {
		if m.GetName() == "" {
			return nil, fmt.Errorf("transport_socket_matches[%d]: a name is required", i)
		}
		fields, err := matchFields(m.GetMatch())
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
// metadata (nil when absent), as matchFields.
func endpointMatchFields(md *corev3.Metadata) (map[string]string, error) {
	s := md.GetFilterMetadata()[transportSocketMatchKey]
	if s == nil {
		return nil, nil
	}
	return matchFields(s)
}

// matchFields turns metadata fields into comparable strings: a string is
// itself, any other value (number, bool, null, list, struct) a form that
// starts with a NUL byte and names its kind, so that Envoy's value
// equality holds (1 equals 1.0, never "1").
func matchFields(s *structpb.Struct) (map[string]string, error) {
	if len(s.GetFields()) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for k, v := range s.GetFields() {
		switch x := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			out[k] = x.StringValue
		case *structpb.Value_NumberValue:
			out[k] = "\x00n" + strconv.FormatFloat(x.NumberValue, 'g', -1, 64)
		case *structpb.Value_BoolValue:
			out[k] = "\x00b" + strconv.FormatBool(x.BoolValue)
		case *structpb.Value_NullValue, nil:
			out[k] = "\x00null"
		default: // list or struct
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", k, err)
			}
			out[k] = "\x00v" + string(b)
		}
	}
	return out, nil
}

// matchTLS is the client configuration of an endpoint: that of the first
// match whose every field its metadata holds with an equal value (a match
// without fields takes every endpoint, with metadata or not, as Envoy's),
// else the cluster's (base).
func matchTLS(matches []tlsMatch, confs []*tls.Config, base *tls.Config, ep endpoint) *tls.Config {
	for i, m := range matches {
		ok := true
		for k, v := range m.match {
			if got, present := ep.tsMatch[k]; !present || got != v {
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
