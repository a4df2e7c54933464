package xds

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/catalog"
)

// Gateway proxy config keys (catalog's), honoured for every gateway kind.
const (
	CfgGatewayBindTaggedAddresses = catalog.CfgGatewayBindTaggedAddresses
	CfgGatewayBindAddresses       = catalog.CfgGatewayBindAddresses
	CfgGatewayNoDefaultBind       = catalog.CfgGatewayNoDefaultBind
	CfgDNSDiscoveryType           = catalog.CfgDNSDiscoveryType
)

// GatewayBind is one address a gateway's listeners bind: "default" (the
// gateway's own), a tagged address ("lan", "wan") or a named
// envoy_gateway_bind_addresses entry. Port 0: the listener's own port
// (ingress listeners keep theirs).
type GatewayBind struct {
	Name    string
	Address string
	Port    int
}

// GatewayBinds returns where a gateway's listeners bind, as Consul
// decides it: the default address (defaultAddr on the instance's port)
// unless envoy_gateway_no_default_bind, the instance's tagged addresses
// when envoy_gateway_bind_tagged_addresses (taggedBinds), then every
// envoy_gateway_bind_addresses entry; an address:port already present is
// skipped. They are sorted by name, "default" first. Two binds on one
// port where either is a wildcard address (0.0.0.0, ::) cannot both bind:
// an error, as is a bad address or port.
func GatewayBinds(inst catalog.ServiceInstance, defaultAddr string) ([]GatewayBind, error) {
	cfg := proxyConfig(inst)
	noDefault, err := parseBool(cfg, CfgGatewayNoDefaultBind)
	if err != nil {
		return nil, err
	}
	tagged, err := parseBool(cfg, CfgGatewayBindTaggedAddresses)
	if err != nil {
		return nil, err
	}
	named, err := parseBindAddresses(cfg)
	if err != nil {
		return nil, err
	}
	var out []GatewayBind
	add := func(b GatewayBind) {
		if !slices.ContainsFunc(out, func(o GatewayBind) bool { return o.Address == b.Address && o.Port == b.Port }) {
			out = append(out, b)
		}
	}
	if !noDefault {
		add(GatewayBind{Name: "default", Address: defaultAddr, Port: inst.Port})
	}
	if tagged {
		for _, b := range taggedBinds(inst) {
			add(b)
		}
	}
	for _, b := range named {
		add(b)
	}
	return out, nil
}

// taggedBinds are an instance's tagged addresses, sorted by name: its
// registered ones (a mesh gateway's lan and wan, or a service's
// tagged_addresses), else "lan" and "wan" at its own address, as
// Consul's agent tags a service. A tagged address without a port uses the
// instance's; one that is not an IP is left out.
func taggedBinds(inst catalog.ServiceInstance) []GatewayBind {
	tagged := inst.TaggedAddresses
	if len(tagged) == 0 {
		tagged = map[string]catalog.TaggedAddress{
			catalog.TaggedLAN: {Address: inst.Address, Port: inst.Port},
			catalog.TaggedWAN: {Address: inst.Address, Port: inst.Port},
		}
	}
	var out []GatewayBind
	for _, name := range sortedKeys(tagged) {
		ta := tagged[name]
		if net.ParseIP(ta.Address) == nil {
			continue
		}
		if ta.Port <= 0 {
			ta.Port = inst.Port
		}
		out = append(out, GatewayBind{Name: name, Address: ta.Address, Port: ta.Port})
	}
	return out
}

// parseBindAddresses reads envoy_gateway_bind_addresses: a map of name to
// {address, port}, sorted by name.
func parseBindAddresses(cfg map[string]any) ([]GatewayBind, error) {
	v, ok := cfg[CfgGatewayBindAddresses]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s must be a map of name to {address, port}, got %T", ErrInvalidProxyConfig, CfgGatewayBindAddresses, v)
	}
	var out []GatewayBind
	for name, a := range m {
		am, ok := a.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s %q must be {address, port}, got %T", ErrInvalidProxyConfig, CfgGatewayBindAddresses, name, a)
		}
		addr, err := parseString(am, "address")
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", CfgGatewayBindAddresses, name, err)
		}
		port, err := parseTimeoutMS(am, "port", 0) // a whole number, like a timeout
		if err != nil || port > 65535 {
			return nil, fmt.Errorf("%w: %s %q: port must be a whole number in 1-65535", ErrInvalidProxyConfig, CfgGatewayBindAddresses, name)
		}
		if net.ParseIP(addr) == nil {
			return nil, fmt.Errorf("%w: %s %q: address %q is not an IP address", ErrInvalidProxyConfig, CfgGatewayBindAddresses, name, addr)
		}
		out = append(out, GatewayBind{Name: name, Address: addr, Port: port})
	}
	slices.SortFunc(out, func(a, b GatewayBind) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// checkBindConflicts refuses two binds of one port where either address is
// a wildcard: the second could not bind. ports gives each bind's ports.
func checkBindConflicts(binds []GatewayBind, ports func(GatewayBind) []int) error {
	type use struct {
		bind GatewayBind
		any  bool
	}
	seen := map[int][]use{}
	for _, b := range binds {
		ip := net.ParseIP(b.Address)
		if ip == nil {
			return fmt.Errorf("%w: gateway bind %q: address %q is not an IP address", ErrInvalidProxyConfig, b.Name, b.Address)
		}
		for _, p := range ports(b) {
			if err := validBind(b.Address, p); err != nil {
				return fmt.Errorf("gateway bind %q: %w", b.Name, err)
			}
			for _, u := range seen[p] {
				if u.any || ip.IsUnspecified() {
					return fmt.Errorf("%w: gateway binds %q (%s) and %q (%s) both take port %d; with a wildcard address only one can bind",
						ErrInvalidProxyConfig, u.bind.Name, u.bind.Address, b.Name, b.Address, p)
				}
			}
			seen[p] = append(seen[p], use{bind: b, any: ip.IsUnspecified()})
		}
	}
	return nil
}

// parseBool reads an optional boolean key (a bool, or "true"/"false").
func parseBool(cfg map[string]any, key string) (bool, error) {
	v, ok := cfg[key]
	if !ok || v == nil {
		return false, nil
	}
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		if x, err := strconv.ParseBool(b); err == nil {
			return x, nil
		}
	}
	return false, fmt.Errorf("%w: %s must be a boolean, got %v", ErrInvalidProxyConfig, key, v)
}
