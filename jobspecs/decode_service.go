package jobspecs

import (
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

var serviceSpec = spec{
	attrs:  []string{"name", "port", "tags", "address_mode", "address", "task", "provider"},
	blocks: []string{"check", "check_restart", "connect"},
	maps:   []string{"meta"},
	unsupported: []string{"enable_tag_override", "canary_tags", "canary_meta", "tagged_addresses",
		"on_update", "cluster", "identity", "weights", "kind"},
}

var checkSpec = spec{
	attrs: []string{"name", "type", "command", "args", "path", "protocol", "port", "expose",
		"address_mode", "interval", "timeout", "method", "task"},
	blocks: []string{"check_restart"},
	unsupported: []string{"header", "body", "initial_status", "success_before_passing",
		"failures_before_critical", "failures_before_warning", "on_update", "grpc_service",
		"grpc_use_tls", "tls_skip_verify", "tls_server_name", "notes"},
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
	for _, cb := range c.blocks["check"] {
		if d.labels(cb) {
			s.Checks = append(s.Checks, d.decodeCheck(cb, p.item("check", len(s.Checks), "")))
		}
	}
	// A service-level check_restart applies to checks that have none.
	if cr := d.checkRestart(c, p); cr != nil {
		for i := range s.Checks {
			if s.Checks[i].CheckRestart == nil {
				cp := *cr
				s.Checks[i].CheckRestart = &cp
			}
		}
	}
	if cb := d.one(c, "connect"); cb != nil && d.labels(cb) {
		s.Connect = d.decodeConnect(cb, p.sub("connect"))
	}
	return s
}

func (d *decoder) decodeCheck(b *hclsyntax.Block, p path) structs.ServiceCheck {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, checkSpec)
	var sc structs.ServiceCheck
	d.setStr(c, p, "name", &sc.Name)
	d.setStr(c, p, "type", &sc.Type)
	d.setStr(c, p, "command", &sc.Command)
	d.setStrs(c, p, "args", &sc.Args)
	d.setStr(c, p, "path", &sc.Path)
	d.setStr(c, p, "protocol", &sc.Protocol)
	d.setStr(c, p, "port", &sc.PortLabel)
	d.setBool(c, p, "expose", &sc.Expose)
	d.setStr(c, p, "address_mode", &sc.AddressMode)
	d.setDur(c, p, "interval", &sc.Interval)
	d.setDur(c, p, "timeout", &sc.Timeout)
	d.setStr(c, p, "method", &sc.Method)
	d.setStr(c, p, "task", &sc.TaskName)
	sc.CheckRestart = d.checkRestart(c, p)
	return sc
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
		gp := p.sub("gateway")
		d.rec(gp, gb.DefRange())
		cc.Gateway = &structs.ConsulGateway{Config: d.freeformBody(gb.Body)}
		for _, kind := range []string{"ingress", "terminating", "mesh"} {
			if _, ok := cc.Gateway.Config[kind]; ok && cc.Gateway.Kind == "" {
				cc.Gateway.Kind = kind
			}
		}
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
		attrs:       []string{"local_service_address", "local_service_port"},
		blocks:      []string{"upstreams", "expose"},
		maps:        []string{"config"},
		unsupported: []string{"transparent_proxy"},
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
