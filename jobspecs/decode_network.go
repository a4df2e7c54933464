package jobspecs

import (
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// decodeNetwork decodes a group network block. A port with a non-zero
// static value is reserved, any other port is dynamic; ports are recorded as
// reserved_port[i] / dynamic_port[i] so validation can point at them.
func (d *decoder) decodeNetwork(b *hclsyntax.Block, p path) *structs.NetworkResource {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs:       []string{"mode", "hostname"},
		blocks:      []string{"port", "dns"},
		unsupported: []string{"mbits", "cni"},
	})
	n := &structs.NetworkResource{}
	d.setStr(c, p, "mode", &n.Mode)
	d.setStr(c, p, "hostname", &n.Hostname)
	if db := d.one(c, "dns"); db != nil && d.labels(db) {
		dp := p.sub("dns")
		d.rec(dp, db.DefRange())
		dc := d.content(db.Body, spec{attrs: []string{"servers", "searches", "options"}})
		n.DNS = &structs.DNSConfig{}
		d.setStrs(dc, dp, "servers", &n.DNS.Servers)
		d.setStrs(dc, dp, "searches", &n.DNS.Searches)
		d.setStrs(dc, dp, "options", &n.DNS.Options)
	}
	for _, pb := range c.blocks["port"] {
		if !d.labels(pb, "label") {
			continue
		}
		pc := d.content(pb.Body, spec{attrs: []string{"static", "to"}, unsupported: []string{"host_network"}})
		port := structs.Port{Label: pb.Labels[0]}
		// Decode into a scratch path first: the list the port lands in is
		// only known once static has been read.
		scratch := p.item("port", 0, "")
		d.setInt(pc, scratch, "static", &port.Value)
		d.setInt(pc, scratch, "to", &port.To)
		var pp path
		// An explicit static = 0 lands among the reserved ports, where
		// validation rejects it, instead of silently becoming dynamic.
		if port.Value != 0 || pc.attrs["static"] != nil && !d.failed[scratch.attr("static").key] {
			pp = p.item("reserved_port", len(n.ReservedPorts), port.Label)
			n.ReservedPorts = append(n.ReservedPorts, port)
		} else {
			pp = p.item("dynamic_port", len(n.DynamicPorts), port.Label)
			n.DynamicPorts = append(n.DynamicPorts, port)
		}
		d.rec(pp, pb.DefRange())
		for _, attr := range []string{"static", "to"} {
			from, to := scratch.attr(attr).key, pp.attr(attr).key
			if r, ok := d.ranges[from]; ok {
				d.ranges[to] = r
				delete(d.ranges, from)
			}
			if d.failed[from] {
				d.failed[to] = true
				delete(d.failed, from)
			}
		}
	}
	return n
}
