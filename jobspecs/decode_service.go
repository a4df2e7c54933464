package jobspecs

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/meshlet/meshlet/structs"
)

var serviceSpec = spec{
	attrs:  []string{"name", "port", "tags", "address_mode", "address", "task", "provider"},
	blocks: []string{"check", "check_restart", "connect"},
	maps:   []string{"meta", "tagged_addresses"},
	unsupported: []string{"enable_tag_override", "canary_tags", "canary_meta",
		"on_update", "cluster", "identity", "weights", "kind"},
}

var checkSpec = spec{
	attrs: []string{"name", "type", "command", "args", "path", "protocol", "port", "expose",
		"address_mode", "interval", "timeout", "method", "task", "body", "grpc_service",
		"grpc_use_tls", "tls_skip_verify", "tls_server_name", "success_before_passing",
		"failures_before_critical", "failures_before_warning", "initial_status", "on_update", "notes"},
	blocks:      []string{"check_restart"},
	maps:        []string{"header"},
	unsupported: []string{"advertise"},
}

// services decodes the service blocks of a group or task.
func (d *decoder) services(c content, p path) []*structs.Service {
	var out []*structs.Service
	for _, b := range c.blocks["service"] {
		if d.labels(b) {
			out = append(out, d.decodeService(b, p.item("service", len(out), "")))
		}
	}
	return out
}

func (d *decoder) decodeService(b *hclsyntax.Block, p path) *structs.Service {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, serviceSpec)
	s := &structs.Service{}
	d.setStr(c, p, "name", &s.Name)
	d.setStr(c, p, "port", &s.PortLabel)
	d.setStrs(c, p, "tags", &s.Tags)
	d.setStr(c, p, "address_mode", &s.AddressMode)
	d.setStr(c, p, "address", &s.Address)
	d.setStr(c, p, "task", &s.TaskName)
	d.setStr(c, p, "provider", &s.Provider)
	s.Meta = d.strMap(c, p, "meta")
	s.TaggedAddresses = d.taggedAddresses(c, p)
	for _, cb := range c.blocks["check"] {
		if d.labels(cb) {
			s.Checks = append(s.Checks, d.decodeCheck(cb, p.item("check", len(s.Checks), "")))
		}
	}
	if cr := d.checkRestart(c, p); cr != nil {
		for i := range s.Checks {
			s.Checks[i].CheckRestart = d.mergeCheckRestart(cr, s.Checks[i].CheckRestart,
				p.sub("check_restart"), p.item("check", i, "").sub("check_restart"))
		}
	}
	if cb := d.one(c, "connect"); cb != nil && d.labels(cb) {
		s.Connect = d.decodeConnect(cb, p.sub("connect"))
	}
	if len(s.TaggedAddresses) > 0 && (s.Connect == nil || !s.Connect.IsGateway()) {
		key := p.attr("tagged_addresses").key
		d.add(SeverityWarning, d.ranges[key], "tagged_addresses has no effect here",
			"meshlet registers tagged addresses for gateway services only; this service ignores them.")
	}
	return s
}

func (d *decoder) decodeCheck(b *hclsyntax.Block, p path) structs.ServiceCheck {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, checkSpec)
	var sc structs.ServiceCheck
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"name", &sc.Name}, {"type", &sc.Type}, {"command", &sc.Command}, {"path", &sc.Path},
		{"protocol", &sc.Protocol}, {"port", &sc.PortLabel}, {"address_mode", &sc.AddressMode},
		{"method", &sc.Method}, {"task", &sc.TaskName}, {"body", &sc.Body},
		{"grpc_service", &sc.GRPCService}, {"tls_server_name", &sc.TLSServerName},
		{"initial_status", &sc.InitialStatus}, {"on_update", &sc.OnUpdate}, {"notes", &sc.Notes},
	} {
		d.setStr(c, p, f.name, f.dst)
	}
	d.setStrs(c, p, "args", &sc.Args)
	d.setBool(c, p, "expose", &sc.Expose)
	d.setBool(c, p, "grpc_use_tls", &sc.GRPCUseTLS)
	d.setBool(c, p, "tls_skip_verify", &sc.TLSSkipVerify)
	d.setDur(c, p, "interval", &sc.Interval)
	d.setDur(c, p, "timeout", &sc.Timeout)
	d.setInt(c, p, "success_before_passing", &sc.SuccessBeforePassing)
	d.setInt(c, p, "failures_before_critical", &sc.FailuresBeforeCritical)
	d.setInt(c, p, "failures_before_warning", &sc.FailuresBeforeWarning)
	sc.Header = d.header(c, p)
	sc.CheckRestart = d.checkRestart(c, p)
	return sc
}

// header decodes a check's header, a map of lists of strings, written as
// a block (header { X-Token = ["a"] }) or an argument (header = {...},
// which also allows quoted names such as "Content-Type").
func (d *decoder) header(c content, p path) map[string][]string {
	key := p.attr("header").key
	if a := c.attrs["header"]; a != nil {
		m, _ := attrValue(d, c, p, "header", convHeader)
		return m
	}
	b := d.one(c, "header")
	if b == nil {
		return nil
	}
	d.ranges[key] = b.DefRange()
	if !d.labels(b) {
		return nil
	}
	for _, nb := range b.Body.Blocks {
		d.errAt(key, nb.TypeRange, "Unexpected block in header",
			fmt.Sprintf("header takes Name = [\"value\", ...] arguments only; %q is a block.", nb.Type))
	}
	out := map[string][]string{}
	for _, a := range sortedAttrs(b.Body) {
		v, hds := d.eval(a.Expr)
		d.addHCL(key, hds)
		if hds.HasErrors() || v.IsNull() || !v.IsWhollyKnown() {
			continue
		}
		vals, err := convStrings(v)
		if err != nil {
			d.errAt(key, a.Expr.Range(), "Incorrect attribute value type",
				fmt.Sprintf("Inappropriate value for header %q: %v, e.g. %s = [\"value\"].", a.Name, err, a.Name))
			continue
		}
		out[a.Name] = vals
	}
	return out
}

func convHeader(v cty.Value) (map[string][]string, error) {
	t := v.Type()
	if !t.IsMapType() && !t.IsObjectType() {
		return nil, errors.New("a map of lists of strings is required")
	}
	out := make(map[string][]string, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if e.IsNull() {
			return nil, fmt.Errorf("element %q: a list of strings is required", k.AsString())
		}
		vals, err := convStrings(e)
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", k.AsString(), err)
		}
		out[k.AsString()] = vals
	}
	return out, nil
}

// copyRanges records the ranges under from (the key and its attributes)
// under to as well, so findings on a copied block point at the original.
func (d *decoder) copyRanges(from, to path) {
	copied := map[string]hcl.Range{}
	for k, r := range d.ranges {
		if k == from.key || strings.HasPrefix(k, from.key+".") {
			copied[to.key+strings.TrimPrefix(k, from.key)] = r
		}
	}
	maps.Copy(d.ranges, copied)
}

// mergeCheckRestart merges a service-level check_restart (svc, at from)
// into a check's own (own, at to; nil when the check has none), field by
// field as Nomad's CheckRestart.Merge: the check's limit wins when above
// 0, its grace when set, its ignore_warnings when true. The result is a
// new value; the ranges of the fields taken from svc are recorded under
// to, so findings on them point at the service's block.
func (d *decoder) mergeCheckRestart(svc, own *structs.CheckRestart, from, to path) *structs.CheckRestart {
	if own == nil {
		d.copyRanges(from, to)
		return svc.Merge(nil)
	}
	inherit := func(name string, kept bool) {
		if r, ok := d.ranges[from.attr(name).key]; ok && !kept {
			d.ranges[to.attr(name).key] = r
		}
	}
	inherit("limit", own.Limit > 0)
	inherit("grace", own.Grace != nil)
	inherit("ignore_warnings", own.IgnoreWarnings)
	return svc.Merge(own)
}

func (d *decoder) checkRestart(c content, p path) *structs.CheckRestart {
	b := d.one(c, "check_restart")
	if b == nil || !d.labels(b) {
		return nil
	}
	p = p.sub("check_restart")
	d.rec(p, b.DefRange())
	cc := d.content(b.Body, spec{attrs: []string{"limit", "grace", "ignore_warnings"}})
	cr := &structs.CheckRestart{}
	d.setInt(cc, p, "limit", &cr.Limit)
	d.setDurPtr(cc, p, "grace", &cr.Grace)
	d.setBool(cc, p, "ignore_warnings", &cr.IgnoreWarnings)
	return cr
}

func (d *decoder) decodeConnect(b *hclsyntax.Block, p path) *structs.ConsulConnect {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{attrs: []string{"native"}, blocks: []string{"sidecar_service", "sidecar_task", "gateway"}})
	cc := &structs.ConsulConnect{}
	d.setBool(c, p, "native", &cc.Native)
	if sb := d.one(c, "sidecar_service"); sb != nil && d.labels(sb) {
		cc.SidecarService = d.decodeSidecarService(sb, p.sub("sidecar_service"))
	}
	if tb := d.one(c, "sidecar_task"); tb != nil && d.labels(tb) {
		cc.SidecarTask = d.decodeSidecarTask(tb, p.sub("sidecar_task"))
	}
	if gb := d.one(c, "gateway"); gb != nil && d.labels(gb) {
		cc.Gateway = d.decodeGateway(gb, p.sub("gateway"))
	}
	return cc
}

func (d *decoder) decodeSidecarService(b *hclsyntax.Block, p path) *structs.ConsulSidecarService {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs:  []string{"port", "tags", "disable_default_tcp_check"},
		blocks: []string{"proxy"},
		maps:   []string{"meta"},
	})
	ss := &structs.ConsulSidecarService{}
	d.setStr(c, p, "port", &ss.Port)
	d.setStrs(c, p, "tags", &ss.Tags)
	d.setBool(c, p, "disable_default_tcp_check", &ss.DisableDefaultTCPCheck)
	ss.Meta = d.strMap(c, p, "meta")
	if pb := d.one(c, "proxy"); pb != nil && d.labels(pb) {
		ss.Proxy = d.decodeProxy(pb, p.sub("proxy"))
	}
	return ss
}

func (d *decoder) decodeProxy(b *hclsyntax.Block, p path) *structs.ConsulProxy {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs:  []string{"local_service_address", "local_service_port"},
		blocks: []string{"upstreams", "expose", "transparent_proxy"},
		maps:   []string{"config"},
	})
	px := &structs.ConsulProxy{}
	d.setStr(c, p, "local_service_address", &px.LocalServiceAddress)
	d.setInt(c, p, "local_service_port", &px.LocalServicePort)
	px.Config = d.freeform(c, p, "config")
	for _, ub := range c.blocks["upstreams"] {
		if d.labels(ub) {
			px.Upstreams = append(px.Upstreams, d.decodeUpstream(ub, p.item("upstream", len(px.Upstreams), "")))
		}
	}
	if tb := d.one(c, "transparent_proxy"); tb != nil && d.labels(tb) {
		px.TransparentProxy = d.decodeTransparentProxy(tb, p.sub("transparent_proxy"))
	}
	if eb := d.one(c, "expose"); eb != nil && d.labels(eb) {
		ep := p.sub("expose")
		d.rec(ep, eb.DefRange())
		ec := d.content(eb.Body, spec{blocks: []string{"path"}})
		px.Expose = &structs.ConsulExposeConfig{}
		for _, pb := range ec.blocks["path"] {
			if !d.labels(pb) {
				continue
			}
			pp := ep.item("path", len(px.Expose.Paths), "")
			d.rec(pp, pb.DefRange())
			pc := d.content(pb.Body, spec{attrs: []string{"path", "protocol", "local_path_port", "listener_port"}})
			xp := &structs.ConsulExposePath{}
			d.setStr(pc, pp, "path", &xp.Path)
			d.setStr(pc, pp, "protocol", &xp.Protocol)
			d.setInt(pc, pp, "local_path_port", &xp.LocalPathPort)
			d.setStr(pc, pp, "listener_port", &xp.ListenerPort)
			px.Expose.Paths = append(px.Expose.Paths, xp)
		}
	}
	return px
}

func (d *decoder) decodeUpstream(b *hclsyntax.Block, p path) *structs.ConsulUpstream {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs:  []string{"destination_name", "local_bind_port", "local_bind_address", "datacenter"},
		blocks: []string{"mesh_gateway"},
		maps:   []string{"config"},
		unsupported: []string{"destination_namespace", "destination_peer", "destination_type",
			"destination_partition", "local_bind_socket_path", "local_bind_socket_mode"},
	})
	u := &structs.ConsulUpstream{}
	d.setStr(c, p, "destination_name", &u.DestinationName)
	d.setInt(c, p, "local_bind_port", &u.LocalBindPort)
	d.setStr(c, p, "local_bind_address", &u.LocalBindAddress)
	d.setStr(c, p, "datacenter", &u.Datacenter)
	u.Config = d.freeform(c, p, "config")
	if mb := d.one(c, "mesh_gateway"); mb != nil && d.labels(mb) {
		mp := p.sub("mesh_gateway")
		d.rec(mp, mb.DefRange())
		mc := d.content(mb.Body, spec{attrs: []string{"mode"}})
		u.MeshGateway = &structs.ConsulMeshGateway{}
		d.setStr(mc, mp, "mode", &u.MeshGateway.Mode)
	}
	return u
}

func (d *decoder) decodeSidecarTask(b *hclsyntax.Block, p path) *structs.SidecarTask {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs:  []string{"name", "driver", "user", "kill_timeout", "shutdown_delay", "kill_signal"},
		blocks: []string{"resources", "logs"},
		maps:   []string{"config", "env", "meta"},
	})
	st := &structs.SidecarTask{}
	d.setStr(c, p, "name", &st.Name)
	d.setStr(c, p, "driver", &st.Driver)
	d.setStr(c, p, "user", &st.User)
	d.setDurPtr(c, p, "kill_timeout", &st.KillTimeout)
	d.setDurPtr(c, p, "shutdown_delay", &st.ShutdownDelay)
	d.setStr(c, p, "kill_signal", &st.KillSignal)
	st.Config = d.freeform(c, p, "config")
	st.Env = d.strMap(c, p, "env")
	st.Meta = d.strMap(c, p, "meta")
	st.Resources = d.decodeResources(c, p)
	st.LogConfig = d.decodeLogs(c, p)
	return st
}

// decodeTransparentProxy reads transparent_proxy for validation; meshlet
// does not run it yet (validation warns).
func (d *decoder) decodeTransparentProxy(b *hclsyntax.Block, p path) *structs.ConsulTransparentProxy {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{attrs: unrunSchemas["transparent_proxy"].attrs})
	tp := &structs.ConsulTransparentProxy{}
	d.setStr(c, p, "uid", &tp.UID)
	d.setInt(c, p, "outbound_port", &tp.OutboundPort)
	d.setStrs(c, p, "exclude_inbound_ports", &tp.ExcludeInboundPorts)
	if v, ok := attrValue(d, c, p, "exclude_outbound_ports", convInts); ok {
		tp.ExcludeOutboundPorts = v
	}
	d.setStrs(c, p, "exclude_outbound_cidrs", &tp.ExcludeOutboundCIDRs)
	d.setStrs(c, p, "exclude_uids", &tp.ExcludeUIDs)
	d.setBool(c, p, "no_dns", &tp.NoDNS)
	return tp
}
