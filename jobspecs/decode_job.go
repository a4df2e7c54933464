package jobspecs

import (
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

var jobSpec = spec{
	attrs:  []string{"region", "namespace", "datacenters", "type", "priority", "name"},
	blocks: []string{"group", "constraint", "spread", "update", "reschedule"},
	maps:   []string{"meta"},
	unsupported: []string{"periodic", "parameterized", "multiregion", "affinity",
		"migrate", "vault", "consul", "ui", "all_at_once", "node_pool", "vault_token", "consul_token",
		"consul_namespace", "vault_namespace"},
}

var groupSpec = spec{
	attrs:  []string{"count", "shutdown_delay"},
	blocks: []string{"task", "network", "service", "constraint", "spread", "restart", "update", "reschedule"},
	maps:   []string{"meta"},
	unsupported: []string{"ephemeral_disk", "volume", "scaling", "affinity",
		"migrate", "disconnect", "consul", "vault", "artifact", "stop_after_client_disconnect",
		"max_client_disconnect", "prevent_reschedule_on_lost"},
}

// decodeJob decodes the job block; nil when it has no usable label.
func (d *decoder) decodeJob(b *hclsyntax.Block) *structs.Job {
	if !d.labels(b, "name") {
		return nil
	}
	p := jobPath
	d.rec(p, b.DefRange())
	job := &structs.Job{ID: b.Labels[0], Name: b.Labels[0]}
	d.ranges[p.attr("id").key] = b.LabelRanges[0]
	c := d.content(b.Body, jobSpec)
	d.setStr(c, p, "name", &job.Name)
	d.setStr(c, p, "region", &job.Region)
	d.setStr(c, p, "namespace", &job.Namespace)
	d.setStrs(c, p, "datacenters", &job.Datacenters)
	d.setStr(c, p, "type", &job.Type)
	d.setInt(c, p, "priority", &job.Priority)
	job.Meta = d.strMap(c, p, "meta")
	job.Constraints = d.constraints(c, p)
	job.Spreads = d.spreads(c, p)
	if ub := d.one(c, "update"); ub != nil {
		job.Update = d.decodeUpdate(ub, p.sub("update"))
	}
	if rb := d.one(c, "reschedule"); rb != nil {
		job.Reschedule = d.decodeReschedule(rb, p.sub("reschedule"))
	}
	for _, gb := range c.blocks["group"] {
		if d.labels(gb, "name") {
			job.TaskGroups = append(job.TaskGroups, d.decodeGroup(gb, p.item("group", len(job.TaskGroups), "")))
		}
	}
	return job
}

func (d *decoder) decodeGroup(b *hclsyntax.Block, p path) *structs.TaskGroup {
	d.rec(p, b.DefRange())
	tg := &structs.TaskGroup{Name: b.Labels[0]}
	c := d.content(b.Body, groupSpec)
	tg.Count = 1
	d.setInt(c, p, "count", &tg.Count)
	d.setDurPtr(c, p, "shutdown_delay", &tg.ShutdownDelay)
	tg.Meta = d.strMap(c, p, "meta")
	tg.Constraints = d.constraints(c, p)
	tg.Spreads = d.spreads(c, p)
	if rb := d.one(c, "restart"); rb != nil {
		tg.RestartPolicy = d.decodeRestart(rb, p.sub("restart"))
	}
	if ub := d.one(c, "update"); ub != nil {
		tg.Update = d.decodeUpdate(ub, p.sub("update"))
	}
	if rb := d.one(c, "reschedule"); rb != nil {
		tg.ReschedulePolicy = d.decodeReschedule(rb, p.sub("reschedule"))
	}
	for _, nb := range c.blocks["network"] {
		if d.labels(nb) {
			tg.Networks = append(tg.Networks, d.decodeNetwork(nb, p.item("network", len(tg.Networks), "")))
		}
	}
	tg.Services = d.services(c, p)
	for _, tb := range c.blocks["task"] {
		if d.labels(tb, "name") {
			tg.Tasks = append(tg.Tasks, d.decodeTask(tb, p.item("task", len(tg.Tasks), "")))
		}
	}
	return tg
}

// constraints decodes the constraint blocks of a job, group or task. Besides
// attribute/operator/value, Nomad's shorthands are accepted:
// distinct_hosts = true, distinct_property = "${meta.rack}", and
// regexp/version/semver/set_contains = "<value>" (with attribute).
func (d *decoder) constraints(c content, p path) []*structs.Constraint {
	var out []*structs.Constraint
	for _, b := range c.blocks["constraint"] {
		if !d.labels(b) {
			continue
		}
		cp := p.item("constraint", len(out), "")
		d.rec(cp, b.DefRange())
		cc := d.content(b.Body, spec{attrs: []string{"attribute", "operator", "value", "distinct_hosts",
			"distinct_property", "regexp", "version", "semver", "set_contains"}})
		con := &structs.Constraint{}
		d.setStr(cc, cp, "attribute", &con.LTarget)
		d.setStr(cc, cp, "operator", &con.Operand)
		d.setStr(cc, cp, "value", &con.RTarget)
		for _, op := range []string{"regexp", "version", "semver", "set_contains"} {
			if cc.has(op) {
				con.Operand = op
				d.setStr(cc, cp, op, &con.RTarget)
				// Findings on the value point at the shorthand.
				if r, ok := d.ranges[cp.attr(op).key]; ok {
					d.rec(cp.attr("value"), r)
				}
				d.failed[cp.attr("value").key] = d.failed[cp.attr(op).key]
			}
		}
		if cc.has("distinct_property") {
			con.Operand = "distinct_property"
			d.setStr(cc, cp, "distinct_property", &con.LTarget)
		}
		if cc.has("distinct_hosts") {
			var on bool
			d.setBool(cc, cp, "distinct_hosts", &on)
			if on {
				con.Operand = "distinct_hosts"
			}
		}
		if con.Operand == "" {
			con.Operand = "="
		}
		out = append(out, con)
	}
	return out
}

func (d *decoder) decodeUpdate(b *hclsyntax.Block, p path) *structs.UpdateStrategy {
	d.rec(p, b.DefRange())
	if !d.labels(b) {
		return nil
	}
	c := d.content(b.Body, spec{
		attrs: []string{"stagger", "max_parallel", "health_check", "min_healthy_time", "healthy_deadline",
			"progress_deadline", "canary", "auto_revert"},
		unsupported: []string{"auto_promote"},
	})
	u := &structs.UpdateStrategy{}
	d.setDurPtr(c, p, "stagger", &u.Stagger)
	d.setIntPtr(c, p, "max_parallel", &u.MaxParallel)
	d.setStrPtr(c, p, "health_check", &u.HealthCheck)
	d.setDurPtr(c, p, "min_healthy_time", &u.MinHealthyTime)
	d.setDurPtr(c, p, "healthy_deadline", &u.HealthyDeadline)
	d.setDurPtr(c, p, "progress_deadline", &u.ProgressDeadline)
	d.setIntPtr(c, p, "canary", &u.Canary)
	d.setBoolPtr(c, p, "auto_revert", &u.AutoRevert)
	return u
}

func (d *decoder) decodeRestart(b *hclsyntax.Block, p path) *structs.RestartPolicy {
	d.rec(p, b.DefRange())
	if !d.labels(b) {
		return nil
	}
	c := d.content(b.Body, spec{attrs: []string{"attempts", "interval", "delay", "mode"},
		unsupported: []string{"render_templates"}})
	rp := &structs.RestartPolicy{}
	d.setIntPtr(c, p, "attempts", &rp.Attempts)
	d.setDurPtr(c, p, "interval", &rp.Interval)
	d.setDurPtr(c, p, "delay", &rp.Delay)
	d.setStrPtr(c, p, "mode", &rp.Mode)
	return rp
}
