package jobspecs

import (
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

var taskSpec = spec{
	attrs:  []string{"driver", "user", "kill_timeout", "kill_signal", "shutdown_delay", "leader", "kind"},
	blocks: []string{"resources", "restart", "constraint", "template", "logs", "lifecycle", "service", "artifact"},
	maps:   []string{"config", "env", "meta"},
	unsupported: []string{"vault", "volume_mount", "dispatch_payload", "scaling", "csi_plugin",
		"identity", "affinity", "spread", "consul", "action", "schedule", "update"},
}

func (d *decoder) decodeTask(b *hclsyntax.Block, p path) *structs.Task {
	d.rec(p, b.DefRange())
	t := &structs.Task{Name: b.Labels[0]}
	c := d.content(b.Body, taskSpec)
	d.setStr(c, p, "driver", &t.Driver)
	d.setStr(c, p, "user", &t.User)
	d.setDurPtr(c, p, "kill_timeout", &t.KillTimeout)
	d.setStr(c, p, "kill_signal", &t.KillSignal)
	d.setDur(c, p, "shutdown_delay", &t.ShutdownDelay)
	d.setBool(c, p, "leader", &t.Leader)
	d.setStr(c, p, "kind", &t.Kind)
	t.Config = d.freeform(c, p, "config")
	t.Env = d.strMap(c, p, "env")
	t.Meta = d.strMap(c, p, "meta")
	t.Resources = d.decodeResources(c, p)
	t.LogConfig = d.decodeLogs(c, p)
	t.Constraints = d.constraints(c, p)
	if rb := d.one(c, "restart"); rb != nil {
		t.RestartPolicy = d.decodeRestart(rb, p.sub("restart"))
	}
	if lb := d.one(c, "lifecycle"); lb != nil && d.labels(lb) {
		lp := p.sub("lifecycle")
		d.rec(lp, lb.DefRange())
		lc := d.content(lb.Body, spec{attrs: []string{"hook", "sidecar"}})
		t.Lifecycle = &structs.TaskLifecycle{}
		d.setStr(lc, lp, "hook", &t.Lifecycle.Hook)
		d.setBool(lc, lp, "sidecar", &t.Lifecycle.Sidecar)
	}
	for _, tb := range c.blocks["template"] {
		if d.labels(tb) {
			t.Templates = append(t.Templates, d.decodeTemplate(tb, p.item("template", len(t.Templates), "")))
		}
	}
	for _, ab := range c.blocks["artifact"] {
		if d.labels(ab) {
			t.Artifacts = append(t.Artifacts, d.decodeArtifact(ab, p.item("artifact", len(t.Artifacts), "")))
		}
	}
	t.Services = d.services(c, p)
	return t
}

func (d *decoder) decodeResources(c content, p path) *structs.Resources {
	b := d.one(c, "resources")
	if b == nil || !d.labels(b) {
		return nil
	}
	p = p.sub("resources")
	d.rec(p, b.DefRange())
	rc := d.content(b.Body, spec{
		attrs:       []string{"cpu", "cores", "memory", "memory_max", "disk"},
		unsupported: []string{"device", "network", "numa", "iops", "secrets"},
	})
	r := &structs.Resources{}
	d.setIntPtr(rc, p, "cpu", &r.CPU)
	d.setIntPtr(rc, p, "cores", &r.Cores)
	d.setIntPtr(rc, p, "memory", &r.MemoryMB)
	d.setIntPtr(rc, p, "memory_max", &r.MemoryMaxMB)
	d.setIntPtr(rc, p, "disk", &r.DiskMB)
	return r
}

func (d *decoder) decodeLogs(c content, p path) *structs.LogConfig {
	b := d.one(c, "logs")
	if b == nil || !d.labels(b) {
		return nil
	}
	p = p.sub("logs")
	d.rec(p, b.DefRange())
	lc := d.content(b.Body, spec{attrs: []string{"max_files", "max_file_size", "disabled"}})
	l := &structs.LogConfig{}
	d.setIntPtr(lc, p, "max_files", &l.MaxFiles)
	d.setIntPtr(lc, p, "max_file_size", &l.MaxFileSizeMB)
	d.setBoolPtr(lc, p, "disabled", &l.Disabled)
	return l
}

func (d *decoder) decodeTemplate(b *hclsyntax.Block, p path) *structs.Template {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, spec{
		attrs: []string{"source", "destination", "data", "change_mode", "env", "change_signal", "splay",
			"perms", "uid", "gid", "left_delimiter", "right_delimiter", "error_on_missing_key"},
		blocks:      []string{"wait", "change_script"},
		unsupported: []string{"vault_grace"},
	})
	t := &structs.Template{}
	d.setStrPtr(c, p, "source", &t.SourcePath)
	d.setStrPtr(c, p, "destination", &t.DestPath)
	d.setStrPtr(c, p, "data", &t.EmbeddedTmpl)
	d.setStrPtr(c, p, "change_mode", &t.ChangeMode)
	d.setStrPtr(c, p, "change_signal", &t.ChangeSignal)
	d.setDurPtr(c, p, "splay", &t.Splay)
	d.setStrPtr(c, p, "perms", &t.Perms)
	d.setIntPtr(c, p, "uid", &t.Uid)
	d.setIntPtr(c, p, "gid", &t.Gid)
	d.setStrPtr(c, p, "left_delimiter", &t.LeftDelim)
	d.setStrPtr(c, p, "right_delimiter", &t.RightDelim)
	d.setBoolPtr(c, p, "env", &t.Envvars)
	d.setBoolPtr(c, p, "error_on_missing_key", &t.ErrMissingKey)
	if wb := d.one(c, "wait"); wb != nil && d.labels(wb) {
		wp := p.sub("wait")
		d.rec(wp, wb.DefRange())
		wc := d.content(wb.Body, spec{attrs: []string{"min", "max"}})
		t.Wait = &structs.WaitConfig{}
		d.setDurPtr(wc, wp, "min", &t.Wait.Min)
		d.setDurPtr(wc, wp, "max", &t.Wait.Max)
	}
	if sb := d.one(c, "change_script"); sb != nil && d.labels(sb) {
		sp := p.sub("change_script")
		d.rec(sp, sb.DefRange())
		d.freeformBody(sb.Body)
		t.ChangeScript = &structs.ChangeScriptConfig{}
	}
	return t
}
