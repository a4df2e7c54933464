package connect

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"

	"github.com/meshlet/meshlet/catalog"
)

// ErrTaggedAddress: a service's tagged_addresses value is neither "ip"
// nor "ip:port".
var ErrTaggedAddress = errors.New("invalid tagged address")

// taggedAddresses merges a service's tagged_addresses (Nomad's: name to
// "ip" or "ip:port", the port defaulting to the registered one) over the
// defaults; nil when both are empty. The defaults map is not modified.
func taggedAddresses(spec map[string]string, defaults map[string]catalog.TaggedAddress, port int) (map[string]catalog.TaggedAddress, error) {
	if len(spec) == 0 {
		return defaults, nil
	}
	out := maps.Clone(defaults)
	if out == nil {
		out = map[string]catalog.TaggedAddress{}
	}
	for name, v := range spec {
		ta, err := parseTaggedAddress(v, port)
		if err != nil {
			return nil, fmt.Errorf("%w: tagged_addresses %q: %w", ErrTaggedAddress, name, err)
		}
		out[name] = ta
	}
	return out, nil
}

// parseTaggedAddress reads "ip" (on port) or "ip:port".
func parseTaggedAddress(v string, port int) (catalog.TaggedAddress, error) {
	if net.ParseIP(v) != nil {
		return catalog.TaggedAddress{Address: v, Port: port}, nil
	}
	host, ps, err := net.SplitHostPort(v)
	if err != nil || net.ParseIP(host) == nil {
		return catalog.TaggedAddress{}, fmt.Errorf("%q is not an IP address or IP:port", v)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return catalog.TaggedAddress{}, fmt.Errorf("%q has an invalid port", v)
	}
	return catalog.TaggedAddress{Address: host, Port: p}, nil
}
