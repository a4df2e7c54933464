// Package taskenv builds a task's environment (Nomad's NOMAD_* variables)
// and interpolates "${...}" references in task config and env: environment
// variables by name (NOMAD_PORT_http), node attributes (${attr.kernel.name}),
// node meta (${meta.rack}) and node fields (${node.unique.id},
// ${node.unique.name}, ${node.datacenter}, ${node.region}). Unknown
// references are left as they are. An Env is immutable once built and safe
// for concurrent use; a Builder is not.
package taskenv

import (
	"net"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// LoopbackIP is what a single node advertises for host-mode ports.
const LoopbackIP = "127.0.0.1"

// DefaultPath is the PATH a task gets unless its env sets one: drivers pass
// the environment exactly, inheriting nothing from the agent.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Builder collects what a task's environment is made of.
type Builder struct {
	node    *structs.Node
	alloc   *structs.Allocation
	task    *structs.Task
	dirs    [3]string // alloc dir, task local dir, secrets dir
	network *structs.AllocNetworkStatus
	extra   map[string]string
}

// NewBuilder starts an environment for task of alloc on node. node may be
// nil (no attributes); alloc.Job must be set.
func NewBuilder(node *structs.Node, alloc *structs.Allocation, task *structs.Task) *Builder {
	if node == nil {
		node = &structs.Node{}
	}
	return &Builder{node: node, alloc: alloc, task: task, extra: map[string]string{}}
}

// SetDirs sets the host paths of the shared alloc dir and the task's
// local/ and secrets/ dirs.
func (b *Builder) SetDirs(allocDir, taskLocalDir, secretsDir string) *Builder {
	b.dirs = [3]string{allocDir, taskLocalDir, secretsDir}
	return b
}

// SetNetworkStatus sets the allocation's bridge address.
func (b *Builder) SetNetworkStatus(st *structs.AllocNetworkStatus) *Builder {
	b.network = st
	return b
}

// SetExtra adds variables (e.g. NOMAD_UPSTREAM_ADDR_<name> from the sidecar
// hook). They override the built-in ones; the task's own env overrides both.
func (b *Builder) SetExtra(env map[string]string) *Builder {
	for k, v := range env {
		b.extra[k] = v
	}
	return b
}

// Build returns the environment.
func (b *Builder) Build() *Env {
	e := &Env{vars: map[string]string{"PATH": DefaultPath}, node: b.nodeVars()}
	b.allocVars(e.vars)
	b.portVars(e.vars)
	b.metaVars(e.vars)
	for k, v := range b.extra {
		e.vars[k] = v
	}
	if b.task != nil {
		user := map[string]string{}
		for k, v := range b.task.Env {
			user[k] = e.ReplaceEnv(v)
		}
		for k, v := range user {
			e.vars[k] = v
		}
	}
	return e
}

func (b *Builder) allocVars(m map[string]string) {
	a, job := b.alloc, b.alloc.Job
	ns := a.Namespace
	if ns == "" && job != nil {
		ns = job.Namespace
	}
	if ns == "" {
		ns = "default"
	}
	m["NOMAD_ALLOC_ID"] = a.ID
	m["NOMAD_SHORT_ALLOC_ID"] = a.ID[:min(8, len(a.ID))]
	m["NOMAD_ALLOC_NAME"] = a.Name
	m["NOMAD_ALLOC_INDEX"] = strconv.Itoa(a.Index())
	m["NOMAD_GROUP_NAME"] = a.TaskGroup
	m["NOMAD_NAMESPACE"] = ns
	m["NOMAD_DC"] = b.node.Datacenter
	if job != nil {
		m["NOMAD_JOB_ID"] = job.ID
		m["NOMAD_JOB_NAME"] = job.Name
		m["NOMAD_REGION"] = job.Region
	}
	if b.task != nil {
		m["NOMAD_TASK_NAME"] = b.task.Name
		if r := b.task.Resources; r != nil {
			setInt(m, "NOMAD_CPU_LIMIT", r.CPU)
			setInt(m, "NOMAD_MEMORY_LIMIT", r.MemoryMB)
			setInt(m, "NOMAD_MEMORY_MAX_LIMIT", r.MemoryMaxMB)
		}
	}
	if b.dirs[0] != "" {
		m["NOMAD_ALLOC_DIR"] = b.dirs[0]
		m["NOMAD_TASK_DIR"] = b.dirs[1]
		m["NOMAD_SECRETS_DIR"] = b.dirs[2]
	}
}

func setInt(m map[string]string, k string, v *int) {
	if v != nil {
		m[k] = strconv.Itoa(*v)
	}
}

// portVars sets the NOMAD_{PORT,IP,ADDR,HOST_*,ALLOC_*}_<label> variables.
// In bridge (and cni/*) mode NOMAD_PORT_<label> is the port inside the
// namespace (To) and NOMAD_ALLOC_IP_<label> the allocation's address; in
// host mode both are the host port and loopback.
func (b *Builder) portVars(m map[string]string) {
	if b.alloc.AllocatedResources == nil {
		return
	}
	bridged := Mode(b.alloc) != structs.NetworkModeHost
	allocIP := LoopbackIP
	if bridged && b.network != nil && b.network.Address != "" {
		allocIP = b.network.Address
	}
	for _, pm := range b.alloc.AllocatedResources.Shared.Ports {
		l := CleanKey(pm.Label)
		hostIP := pm.HostIP
		if hostIP == "" {
			hostIP = LoopbackIP
		}
		to := pm.To
		if to <= 0 {
			to = pm.Value
		}
		port := pm.Value
		if bridged {
			port = to
		}
		m["NOMAD_PORT_"+l] = strconv.Itoa(port)
		m["NOMAD_IP_"+l] = hostIP
		m["NOMAD_ADDR_"+l] = net.JoinHostPort(hostIP, strconv.Itoa(pm.Value))
		m["NOMAD_HOST_PORT_"+l] = strconv.Itoa(pm.Value)
		m["NOMAD_HOST_IP_"+l] = hostIP
		m["NOMAD_HOST_ADDR_"+l] = net.JoinHostPort(hostIP, strconv.Itoa(pm.Value))
		m["NOMAD_ALLOC_PORT_"+l] = strconv.Itoa(to)
		m["NOMAD_ALLOC_IP_"+l] = allocIP
		m["NOMAD_ALLOC_ADDR_"+l] = net.JoinHostPort(allocIP, strconv.Itoa(to))
	}
}

// metaVars sets NOMAD_META_<key> (as written and upper-cased) from job,
// group and task meta, the most specific winning.
func (b *Builder) metaVars(m map[string]string) {
	merged := map[string]string{}
	if job := b.alloc.Job; job != nil {
		for k, v := range job.Meta {
			merged[k] = v
		}
		if tg := job.LookupTaskGroup(b.alloc.TaskGroup); tg != nil {
			for k, v := range tg.Meta {
				merged[k] = v
			}
		}
	}
	if b.task != nil {
		for k, v := range b.task.Meta {
			merged[k] = v
		}
	}
	for k, v := range merged {
		m["NOMAD_META_"+CleanKey(k)] = v
		m["NOMAD_META_"+strings.ToUpper(CleanKey(k))] = v
	}
}

func (b *Builder) nodeVars() map[string]string {
	n := b.node
	out := map[string]string{
		"node.unique.id":   n.ID,
		"node.unique.name": n.Name,
		"node.datacenter":  n.Datacenter,
		"node.class":       "",
	}
	if b.alloc != nil && b.alloc.Job != nil {
		out["node.region"] = b.alloc.Job.Region
	}
	for k, v := range n.Attributes {
		out["attr."+k] = v
	}
	for k, v := range n.Meta {
		out["meta."+k] = v
	}
	return out
}

// Mode is the allocation's network mode ("host" when it has no network).
func Mode(a *structs.Allocation) string {
	if a.AllocatedResources != nil && len(a.AllocatedResources.Shared.Networks) > 0 && a.AllocatedResources.Shared.Networks[0].Mode != "" {
		return a.AllocatedResources.Shared.Networks[0].Mode
	}
	if a.Job != nil {
		if tg := a.Job.LookupTaskGroup(a.TaskGroup); tg != nil && len(tg.Networks) > 0 && tg.Networks[0].Mode != "" {
			return tg.Networks[0].Mode
		}
	}
	return structs.NetworkModeHost
}

// CleanKey makes s a valid environment variable name part: every character
// other than letters, digits and '_' becomes '_' ("count-api" → "count_api").
func CleanKey(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}
