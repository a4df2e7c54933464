package jobspecs

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// decodeGateway decodes a connect gateway block: free-form into Config
// (checked against Nomad's schema), then, for an ingress gateway, its
// proxy and ingress blocks into typed structs read from that free-form
// value (so no expression is evaluated twice), with the source ranges of
// the blocks and arguments recorded for validation's diagnostics.
func (d *decoder) decodeGateway(b *hclsyntax.Block, p path) *structs.ConsulGateway {
	d.rec(p, b.DefRange())
	g := &structs.ConsulGateway{Config: d.freeformBody(b.Body)}
	d.checkUnrun(b.Body, gatewaySchema)
	for _, kind := range []string{structs.GatewayKindIngress, structs.GatewayKindTerminating, structs.GatewayKindMesh} {
		if _, ok := g.Config[kind]; ok && g.Kind == "" {
			g.Kind = kind
		}
	}
	if _, ok := g.Config[structs.GatewayKindMesh]; ok {
		g.Mesh = &structs.ConsulMeshConfigEntry{}
	}
	_, ingress := g.Config[structs.GatewayKindIngress]
	_, terminating := g.Config[structs.GatewayKindTerminating]
	if !ingress && !terminating {
		return g
	}
	blocks := blocksByType(b.Body)
	if px := firstMap(g.Config["proxy"]); px != nil {
		g.Proxy = d.decodeGatewayProxy(px, p.sub("proxy"), first(blocks["proxy"]))
	}
	if ingress {
		ip := p.sub("ingress")
		ib := first(blocks["ingress"])
		d.recBlock(ip, ib)
		g.Ingress = d.decodeIngress(firstMap(g.Config["ingress"]), ip, ib)
	}
	if terminating {
		tp := p.sub("terminating")
		tb := first(blocks["terminating"])
		d.recBlock(tp, tb)
		g.Terminating = d.decodeTerminating(firstMap(g.Config["terminating"]), tp, tb)
	}
	return g
}

func (d *decoder) decodeGatewayProxy(px map[string]any, pp path, pb *hclsyntax.Block) *structs.ConsulGatewayProxy {
	d.recBlock(pp, pb)
	out := &structs.ConsulGatewayProxy{}
	if s, ok := d.gwString(px, pp, pb, "connect_timeout"); ok {
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.errAt(pp.attr("connect_timeout").key, d.ranges[pp.attr("connect_timeout").key], "Invalid duration", fmt.Sprintf(
				"Inappropriate value for attribute %q: %v; use a Go duration such as \"30s\", \"5m\" or \"1h\".", "connect_timeout", err))
		} else {
			out.ConnectTimeout = &dur
		}
	}
	d.decodeGatewayBind(px, pp, pb, out)
	return out
}

// decodeTerminating decodes a terminating block's service blocks (Nomad's
// api.ConsulLinkedService: name, ca_file, cert_file, key_file, sni).
func (d *decoder) decodeTerminating(m map[string]any, p path, b *hclsyntax.Block) *structs.ConsulTerminatingConfigEntry {
	out := &structs.ConsulTerminatingConfigEntry{}
	var sblocks []*hclsyntax.Block
	if b != nil {
		sblocks = blocksByType(b.Body)["service"]
	}
	for j, sm := range asMaps(m["service"]) {
		sb := nth(sblocks, j)
		s := &structs.ConsulLinkedService{}
		s.Name, _ = d.gwString(sm, p.item("service", j, ""), sb, "name")
		sp := p.item("service", j, s.Name)
		d.recBlock(sp, sb)
		s.CAFile, _ = d.gwString(sm, sp, sb, "ca_file")
		s.CertFile, _ = d.gwString(sm, sp, sb, "cert_file")
		s.KeyFile, _ = d.gwString(sm, sp, sb, "key_file")
		s.SNI, _ = d.gwString(sm, sp, sb, "sni")
		out.Services = append(out.Services, s)
	}
	return out
}

func (d *decoder) decodeIngress(m map[string]any, p path, b *hclsyntax.Block) *structs.ConsulIngressConfigEntry {
	in := &structs.ConsulIngressConfigEntry{}
	var blocks map[string][]*hclsyntax.Block
	if b != nil {
		blocks = blocksByType(b.Body)
	}
	if tm := firstMap(m["tls"]); tm != nil {
		in.TLS = d.decodeGatewayTLS(tm, p.sub("tls"), first(blocks["tls"]))
	}
	for i, lm := range asMaps(m["listener"]) {
		lp := p.item("listener", i, "")
		lb := nth(blocks["listener"], i)
		d.recBlock(lp, lb)
		l := &structs.ConsulIngressListener{}
		l.Port, _ = d.gwInt(lm, lp, lb, "port")
		l.Protocol, _ = d.gwString(lm, lp, lb, "protocol")
		var sblocks []*hclsyntax.Block
		if lb != nil {
			sblocks = blocksByType(lb.Body)["service"]
		}
		for j, sm := range asMaps(lm["service"]) {
			sb := nth(sblocks, j)
			s := &structs.ConsulIngressService{}
			s.Name, _ = d.gwString(sm, lp.item("service", j, ""), sb, "name")
			sp := lp.item("service", j, s.Name)
			d.recBlock(sp, sb)
			if hs, ok := sm["hosts"].([]any); ok {
				for _, h := range hs {
					if hstr, ok := h.(string); ok {
						s.Hosts = append(s.Hosts, hstr)
					}
				}
			}
			d.recAttr(sp, sb, "hosts")
			d.warnIngressServiceUnrun(sb)
			if tm := firstMap(sm["tls"]); tm != nil && sb != nil {
				s.TLS = d.decodeGatewayTLS(tm, sp.sub("tls"), first(blocksByType(sb.Body)["tls"]))
			}
			l.Services = append(l.Services, s)
		}
		in.Listeners = append(in.Listeners, l)
	}
	return in
}

// gwString reads a string argument of a decoded gateway block, recording
// its range; a value of another type is an error at the argument.
func (d *decoder) gwString(m map[string]any, p path, b *hclsyntax.Block, name string) (string, bool) {
	v, ok := m[name]
	if !ok || v == nil {
		return "", false
	}
	d.recAttr(p, b, name)
	switch s := v.(type) {
	case string:
		return s, true
	case bool, int, int64, float64:
		return fmt.Sprint(s), true
	}
	key := p.attr(name).key
	d.errAt(key, d.ranges[key], "Incorrect attribute value type",
		fmt.Sprintf("Inappropriate value for attribute %q: a string is required.", name))
	return "", false
}

// gwInt reads a whole-number argument of a decoded gateway block.
func (d *decoder) gwInt(m map[string]any, p path, b *hclsyntax.Block, name string) (int, bool) {
	v, ok := m[name]
	if !ok || v == nil {
		return 0, false
	}
	d.recAttr(p, b, name)
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		if n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), true
		}
	}
	key := p.attr(name).key
	d.errAt(key, d.ranges[key], "Incorrect attribute value type",
		fmt.Sprintf("Inappropriate value for attribute %q: a whole number is required.", name))
	return 0, false
}

func (d *decoder) recBlock(p path, b *hclsyntax.Block) {
	if b != nil {
		d.rec(p, b.DefRange())
	}
}

func (d *decoder) recAttr(p path, b *hclsyntax.Block, name string) {
	if b == nil {
		return
	}
	if a := b.Body.Attributes[name]; a != nil {
		d.ranges[p.attr(name).key] = a.Expr.Range()
	}
}

// blocksByType groups a body's literal blocks by type (a dynamic block is
// left out: its blocks have no range of their own).
func blocksByType(body *hclsyntax.Body) map[string][]*hclsyntax.Block {
	out := map[string][]*hclsyntax.Block{}
	for _, b := range body.Blocks {
		out[b.Type] = append(out[b.Type], b)
	}
	return out
}

func first(bs []*hclsyntax.Block) *hclsyntax.Block { return nth(bs, 0) }

func nth(bs []*hclsyntax.Block, i int) *hclsyntax.Block {
	if i < len(bs) {
		return bs[i]
	}
	return nil
}

// asMaps is a free-form block value as a list: one block decodes to a
// map, several to a list of maps.
func asMaps(v any) []map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return []map[string]any{x}
	case []any:
		var out []map[string]any
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}

func firstMap(v any) map[string]any {
	if ms := asMaps(v); len(ms) > 0 {
		return ms[0]
	}
	return nil
}
