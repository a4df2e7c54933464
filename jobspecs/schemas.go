package jobspecs

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// unrunSchema is Nomad's schema of a block meshlet parses but does not
// run: its body is checked against it (a typo is an error at its
// position, as Nomad reports it) and the block then only warns that it
// has no effect.
type unrunSchema struct {
	attrs  []string
	maps   []string // `name { k = v }` or `name = { ... }`, contents free
	blocks map[string]*unrunSchema
}

var (
	mountOptionsSchema = &unrunSchema{attrs: []string{"fs_type", "mount_flags"}}
	identitySchema     = &unrunSchema{attrs: []string{"name", "aud", "env", "file", "ttl", "change_mode", "change_signal", "filepath"}}
	consulSchema       = &unrunSchema{attrs: []string{"cluster", "namespace", "partition"}}
)

// gatewayTLSSchema is an ingress gateway's (or its service's) tls block.
var gatewayTLSSchema = &unrunSchema{attrs: []string{"enabled", "tls_min_version", "tls_max_version", "cipher_suites"},
	blocks: map[string]*unrunSchema{"sds": {attrs: []string{"cluster_name", "cert_resource"}}}}

// gatewaySchema is Nomad's connect gateway block: its proxy, and one of
// ingress, terminating and mesh.
var gatewaySchema = &unrunSchema{blocks: map[string]*unrunSchema{
	"proxy": {attrs: []string{"connect_timeout", "envoy_gateway_bind_tagged_addresses", "envoy_gateway_no_default_bind",
		"envoy_dns_discovery_type"}, maps: []string{"config"},
		blocks: map[string]*unrunSchema{"envoy_gateway_bind_addresses": {attrs: []string{"address", "port"}}}},
	"ingress": {blocks: map[string]*unrunSchema{
		"tls": gatewayTLSSchema,
		"listener": {attrs: []string{"port", "protocol"}, blocks: map[string]*unrunSchema{
			"service": {attrs: []string{"name", "hosts", "max_connections", "max_pending_requests", "max_concurrent_requests"},
				maps: []string{"request_headers", "response_headers"}, blocks: map[string]*unrunSchema{"tls": gatewayTLSSchema}},
		}},
	}},
	"terminating": {blocks: map[string]*unrunSchema{
		"service": {attrs: []string{"name", "ca_file", "cert_file", "key_file", "sni"}},
	}},
	"mesh": {},
}}

// unrunSchemas are Nomad's schemas (api package, 1.9) of the blocks the
// decoders list as unsupported. A block without an entry stays free-form.
var unrunSchemas = map[string]*unrunSchema{
	"affinity":       {attrs: []string{"attribute", "operator", "value", "weight"}},
	"ephemeral_disk": {attrs: []string{"sticky", "migrate", "size"}},
	"scaling":        {attrs: []string{"enabled", "min", "max"}, maps: []string{"policy"}},
	"volume": {attrs: []string{"type", "source", "read_only", "access_mode", "attachment_mode", "per_alloc", "sticky"},
		blocks: map[string]*unrunSchema{"mount_options": mountOptionsSchema}},
	"volume_mount": {attrs: []string{"volume", "destination", "read_only", "propagation_mode", "selinux_label"}},
	"vault": {attrs: []string{"policies", "role", "namespace", "cluster", "change_mode", "change_signal", "env",
		"disable_file", "allow_token_expiration"}},
	"artifact":         {attrs: []string{"source", "destination", "mode", "chown", "insecure"}, maps: []string{"options", "headers"}},
	"identity":         identitySchema,
	"consul":           consulSchema,
	"migrate":          {attrs: []string{"max_parallel", "health_check", "min_healthy_time", "healthy_deadline"}},
	"disconnect":       {attrs: []string{"lost_after", "replace", "reconcile", "stop_on_client_after"}},
	"periodic":         {attrs: []string{"cron", "crons", "prohibit_overlap", "time_zone", "enabled"}},
	"parameterized":    {attrs: []string{"payload", "meta_required", "meta_optional"}},
	"dispatch_payload": {attrs: []string{"file"}},
	"csi_plugin":       {attrs: []string{"id", "type", "mount_dir", "stage_publish_base_dir", "health_timeout"}},
	"action":           {attrs: []string{"command", "args"}},
	"weights":          {attrs: []string{"passing", "warning"}},
	"transparent_proxy": {attrs: []string{"uid", "outbound_port", "exclude_inbound_ports", "exclude_outbound_ports",
		"exclude_outbound_cidrs", "exclude_uids", "no_dns"}},
	"multiregion": {blocks: map[string]*unrunSchema{
		"strategy": {attrs: []string{"max_parallel", "on_failure"}},
		"region":   {attrs: []string{"count", "datacenters", "node_pool"}, maps: []string{"meta"}},
	}},
}

// checkUnrun reports what body has beyond sch, recursively.
func (d *decoder) checkUnrun(body *hclsyntax.Body, sch *unrunSchema) {
	var blockNames []string
	for name := range sch.blocks {
		blockNames = append(blockNames, name)
	}
	slices.Sort(blockNames)
	for _, a := range sortedAttrs(body) {
		if slices.Contains(sch.attrs, a.Name) || slices.Contains(sch.maps, a.Name) {
			continue
		}
		d.add(SeverityError, a.NameRange, "Unsupported argument", fmt.Sprintf(
			"An argument named %q is not expected here.%s", a.Name, suggest(a.Name, sch.attrs, sch.maps, blockNames)))
	}
	for _, b := range body.Blocks {
		if b.Type == "dynamic" && len(b.Labels) == 1 {
			b = dynamicContent(b) // checked as the blocks it generates
		}
		switch {
		case b == nil || slices.Contains(sch.maps, b.Type):
		case sch.blocks[b.Type] != nil:
			d.checkUnrun(b.Body, sch.blocks[b.Type])
		default:
			d.add(SeverityError, b.TypeRange, "Unsupported block type", fmt.Sprintf(
				"Blocks of type %q are not expected here.%s", b.Type, suggest(b.Type, blockNames, sch.maps, sch.attrs)))
		}
	}
}

// dynamicContent is a dynamic block seen as one block it generates: its
// content, typed by its label (nil when it has no content block).
func dynamicContent(b *hclsyntax.Block) *hclsyntax.Block {
	for _, cb := range b.Body.Blocks {
		if cb.Type == "content" {
			out := *cb
			out.Type = b.Labels[0]
			return &out
		}
	}
	return nil
}
