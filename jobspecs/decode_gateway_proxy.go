package jobspecs

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// decodeGatewayBind decodes a gateway proxy block's bind and DNS options
// (envoy_gateway_bind_tagged_addresses, envoy_gateway_no_default_bind,
// envoy_dns_discovery_type, envoy_gateway_bind_addresses "name" {
// address, port }) and its config map.
func (d *decoder) decodeGatewayBind(px map[string]any, pp path, pb *hclsyntax.Block, out *structs.ConsulGatewayProxy) {
	out.EnvoyGatewayBindTaggedAddresses = d.gwBool(px, pp, pb, "envoy_gateway_bind_tagged_addresses")
	out.EnvoyGatewayNoDefaultBind = d.gwBool(px, pp, pb, "envoy_gateway_no_default_bind")
	out.EnvoyDNSDiscoveryType, _ = d.gwString(px, pp, pb, "envoy_dns_discovery_type")
	if c := firstMap(px["config"]); c != nil {
		out.Config = maps.Clone(c)
	}
	var blocks []*hclsyntax.Block
	if pb != nil {
		blocks = blocksByType(pb.Body)["envoy_gateway_bind_addresses"]
	}
	all := map[string]map[string]any{}
	for _, m := range asMaps(px["envoy_gateway_bind_addresses"]) {
		for name, v := range m {
			am, _ := v.(map[string]any)
			all[name] = am
		}
	}
	// Indexed in name order, as checkGatewayProxy reports them.
	for i, name := range slices.Sorted(maps.Keys(all)) {
		bp := pp.item("envoy_gateway_bind_addresses", i, name)
		bb := blockLabeled(blocks, name)
		d.recBlock(bp, bb)
		a := &structs.ConsulGatewayBindAddress{Name: name}
		a.Address, _ = d.gwString(all[name], bp, bb, "address")
		a.Port, _ = d.gwInt(all[name], bp, bb, "port")
		if out.EnvoyGatewayBindAddresses == nil {
			out.EnvoyGatewayBindAddresses = map[string]*structs.ConsulGatewayBindAddress{}
		}
		out.EnvoyGatewayBindAddresses[name] = a
	}
}

// blockLabeled is the block with the given first label.
func blockLabeled(bs []*hclsyntax.Block, label string) *hclsyntax.Block {
	for _, b := range bs {
		if len(b.Labels) > 0 && b.Labels[0] == label {
			return b
		}
	}
	return nil
}

// gwBool reads a boolean argument of a decoded gateway block.
func (d *decoder) gwBool(m map[string]any, p path, b *hclsyntax.Block, name string) bool {
	v, ok := m[name]
	if !ok || v == nil {
		return false
	}
	d.recAttr(p, b, name)
	if x, ok := v.(bool); ok {
		return x
	}
	key := p.attr(name).key
	d.errAt(key, d.ranges[key], "Incorrect attribute value type", fmt.Sprintf("Inappropriate value for attribute %q: a bool is required.", name))
	return false
}

// checkGatewayProxy applies Nomad's rules to a gateway's proxy block:
// a known DNS discovery type, and bind addresses with an IP address and a
// port.
func checkGatewayProxy(px *structs.ConsulGatewayProxy, p path, report reporter) {
	if px == nil {
		return
	}
	switch strings.ToUpper(px.EnvoyDNSDiscoveryType) {
	case "", "STRICT_DNS", "LOGICAL_DNS":
	default:
		report(SeverityError, p.attr("envoy_dns_discovery_type"), "Invalid envoy_dns_discovery_type",
			fmt.Sprintf("Consul Gateway Proxy Envoy DNS Discovery type must be STRICT_DNS or LOGICAL_DNS, got %q.", px.EnvoyDNSDiscoveryType))
	}
	names := slices.Sorted(maps.Keys(px.EnvoyGatewayBindAddresses))
	for i, name := range names {
		a := px.EnvoyGatewayBindAddresses[name]
		ap := p.item("envoy_gateway_bind_addresses", i, name)
		if a == nil {
			continue
		}
		if net.ParseIP(a.Address) == nil {
			report(SeverityError, ap.attr("address"), "Invalid gateway bind address",
				fmt.Sprintf("Bind address %q: address %q is not an IP address.", name, a.Address))
		}
		if a.Port < 1 || a.Port > 65535 {
			report(SeverityError, ap.attr("port"), "Invalid gateway bind address",
				fmt.Sprintf("Bind address %q requires a port in 1-65535, got %d.", name, a.Port))
		}
	}
	if px.EnvoyGatewayNoDefaultBind && !px.EnvoyGatewayBindTaggedAddresses && len(px.EnvoyGatewayBindAddresses) == 0 {
		report(SeverityWarning, p.attr("envoy_gateway_no_default_bind"), "Gateway binds nothing",
			"With envoy_gateway_no_default_bind and no tagged or named bind address, the gateway has no listener.")
	}
}
